"""aer_bench: the research bench beside the aer_trl library (studies, their statistics, tables, figures and docs
blocks; the notebooks' runner). It uses the library as a user would; the library never imports it."""
