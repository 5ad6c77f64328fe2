"""The chat template a trainer formats conversational prompts with (the config's `chat_template_path`): a built-in
one ('plain', for a base model) or a Jinja file, set on the tokenizer and saved with it, so evaluation formats prompts
the same way; a tokenizer without a template and conversational prompts are refused while the trainer is built."""

from __future__ import annotations

# A base model's prompt (no chat template of its own, e.g. Llama-3.1-8B): the conversation as plain text, one BOS
# (TRL encodes a templated prompt without adding special tokens), "Question:"/"Answer:" turns, and the generation
# prompt "Answer:". A base model writes on past its answer into a next "Question:": the recipes stop there
# (`BASE_MODEL_STOP`).
PLAIN_CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}"
    "{% if message['role'] == 'system' %}{{ message['content'] }}\n\n"
    "{% elif message['role'] == 'user' %}Question: {{ message['content'] }}\n"
    "{% else %}Answer: {{ message['content'] }}\n\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}Answer:{% endif %}"
)
CHAT_TEMPLATES = {"plain": PLAIN_CHAT_TEMPLATE}
BASE_MODEL_STOP = "\nQuestion:"


def read_chat_template(value: str, setting: str = "chat_template_path") -> str:
    """The Jinja template `value` names: a built-in one (`CHAT_TEMPLATES`: 'plain') or a file's text."""
    if value in CHAT_TEMPLATES:
        return CHAT_TEMPLATES[value]
    from pathlib import Path

    path = Path(value).expanduser()
    if not path.is_file():
        raise ValueError(
            f"{setting}={value!r}: neither a built-in template ({', '.join(sorted(CHAT_TEMPLATES))}) nor a file"
        )
    text = path.read_text()
    if "{%" not in text and "{{" not in text:
        raise ValueError(f"{setting}={value!r}: {path} holds no Jinja template (no '{{{{' or '{{%')")
    return text


def set_chat_template(tokenizer, chat_template_path: str | None, conversational: bool, setting="chat_template_path"):
    """The chat template prompts are formatted with: `chat_template_path`'s where given (it replaces the tokenizer's
    own, and is saved with the tokenizer in every checkpoint, so evaluation formats prompts the same way). A
    tokenizer without a template of its own and none given cannot format conversational prompts: refused here,
    naming the setting, rather than inside TRL at the first rollout."""
    tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor's tokenizer
    if chat_template_path:
        tokenizer.chat_template = read_chat_template(chat_template_path, setting)
    elif conversational and not getattr(tokenizer, "chat_template", None):
        raise ValueError(
            f"the tokenizer ({type(tokenizer).__name__}, {getattr(tokenizer, 'name_or_path', '')!r}) has no chat "
            f"template and the prompts are conversations (role/content turns): set {setting} to a Jinja template "
            f"file, or {setting}='plain' for a base model (Question:/Answer: turns after one BOS; docs/usage.md)"
        )


def prompts_are_conversational(dataset) -> bool:
    """Whether a training set's prompts are conversations (judged on its first row, as TRL does); False for none."""
    if dataset is None:
        return False
    from trl.data_utils import is_conversational

    try:
        first = next(iter(dataset))
    except StopIteration:
        return False
    return is_conversational(first)
