"""A stand-in for the Hugging Face Hub, for the rehearsal (`make rehearse`) and tests: with AER_HUB_CAPTURE set,
`huggingface_hub`'s `create_repo` / `upload_folder` / `upload_file` (and transformers' imports of them) copy what
would be uploaded under $AER_HUB_CAPTURE/<repo_id>/ and append each commit to $AER_HUB_CAPTURE/commits.jsonl,
applying the same allow/ignore patterns. Loaded as `sitecustomize` (this folder on PYTHONPATH) before anything
imports transformers; does nothing without the variable."""

import os

if os.environ.get("AER_HUB_CAPTURE"):
    import json
    import shutil
    from concurrent.futures import Future
    from pathlib import Path

    import huggingface_hub
    from huggingface_hub import hf_api
    from huggingface_hub.utils import filter_repo_objects

    ROOT = Path(os.environ["AER_HUB_CAPTURE"])

    def _log(entry):
        ROOT.mkdir(parents=True, exist_ok=True)
        with (ROOT / "commits.jsonl").open("a") as f:
            f.write(json.dumps(entry) + "\n")

    def _done(value, run_as_future):
        if not run_as_future:
            return value
        future = Future()
        future.set_result(value)
        return future

    def create_repo(repo_id, *args, **kwargs):
        (ROOT / repo_id).mkdir(parents=True, exist_ok=True)
        _log({"op": "create_repo", "repo_id": repo_id, "private": kwargs.get("private")})
        return hf_api.RepoUrl(f"https://huggingface.co/{repo_id}")

    def upload_folder(*, repo_id, folder_path, path_in_repo=None, commit_message=None, allow_patterns=None,
                      ignore_patterns=None, run_as_future=False, **kwargs):  # fmt: skip
        folder = Path(folder_path)
        files = [str(p.relative_to(folder)) for p in sorted(folder.rglob("*")) if p.is_file()]
        files = list(filter_repo_objects(files, allow_patterns=allow_patterns, ignore_patterns=ignore_patterns))
        dest = ROOT / repo_id / (path_in_repo or "")
        for name in files:
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(folder / name, dest / name)
        _log({"op": "upload_folder", "repo_id": repo_id, "path_in_repo": path_in_repo or "",
              "commit_message": commit_message, "files": files})  # fmt: skip
        return _done(f"https://huggingface.co/{repo_id}/commit/captured", run_as_future)

    def upload_file(*, path_or_fileobj, path_in_repo, repo_id, commit_message=None, run_as_future=False, **kwargs):
        dest = ROOT / repo_id / path_in_repo
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path_or_fileobj, dest)
        _log({"op": "upload_file", "repo_id": repo_id, "path_in_repo": path_in_repo, "commit_message": commit_message})
        return _done(f"https://huggingface.co/{repo_id}/blob/main/{path_in_repo}", run_as_future)

    for name, fn in {"create_repo": create_repo, "upload_folder": upload_folder, "upload_file": upload_file}.items():
        setattr(hf_api.HfApi, name, lambda self, *a, _fn=fn, **k: _fn(*a, **k))
        setattr(hf_api, name, fn)
        setattr(huggingface_hub, name, fn)
