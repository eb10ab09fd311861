#!/usr/bin/env python3
"""Turns a prompt into the token ids mtrun --sample-prompt takes, with the
tokenizer's own code (transformers' AutoTokenizer on a local folder holding
tokenizer.json and tokenizer_config.json: a Hugging Face model folder, an
mtrun --export folder, or the OUT.tokenizer/ tools/prepare_data.py keeps).
Nothing is downloaded.

When the tokenizer has a chat template, the prompt is one user turn (after
--system's, if given) rendered with it and its generation prompt, as
transformers' generate() would be given it; --raw tokenizes the text as it
is. The ids go to stdout (or -o FILE), decimal, separated by spaces; a line
on stderr says how the prompt was made and how many tokens it holds. mtrun
decodes the continuation with the data's vocabulary (X.vocab.json).

usage: prompt_tokens.py --tokenizer DIR [--raw] [--system TEXT] [-o FILE] TEXT
"""
import argparse
import sys


def prompt_ids(tok, text, raw=False, system=None):
    """The prompt's token ids, and how they were made."""
    template = getattr(tok, "chat_template", None)
    if raw or not template:
        return tok(text, add_special_tokens=True)["input_ids"], "the text as it is" if raw else "no chat template"
    turns = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": text}]
    ids = tok.apply_chat_template(turns, tokenize=True, add_generation_prompt=True)
    if hasattr(ids, "keys"):  # (a BatchEncoding from some transformers versions on)
        ids = ids["input_ids"]
    return list(ids), "the tokenizer's chat template, one user turn and the generation prompt"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("text", help="the prompt")
    ap.add_argument("--tokenizer", required=True, help="a folder with tokenizer.json and tokenizer_config.json")
    ap.add_argument("--raw", action="store_true", help="no chat template: the text's own tokens")
    ap.add_argument("--system", help="a system turn before the user's (with the chat template)")
    ap.add_argument("-o", "--out", help="the file to write the ids into (default: standard output)")
    a = ap.parse_args()
    try:
        from transformers import AutoTokenizer
    except ImportError:
        print("prompt_tokens.py: error: transformers is not installed: python3 -m pip install transformers",
              file=sys.stderr)
        return 1
    try:
        tok = AutoTokenizer.from_pretrained(a.tokenizer, local_files_only=True)
    except (OSError, ValueError) as e:
        print(f"prompt_tokens.py: error: {a.tokenizer}: no tokenizer to load ({e})", file=sys.stderr)
        return 1
    ids, how = prompt_ids(tok, a.text, a.raw, a.system)
    line = " ".join(str(int(i)) for i in ids) + "\n"
    if a.out:
        with open(a.out, "w") as f:
            f.write(line)
    else:
        sys.stdout.write(line)
    print(f"prompt_tokens.py: {len(ids)} tokens: {how}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
