#!/usr/bin/env python3
"""Writes the chat-template fixtures of tests/test_chat_template.c.

Run from the repository root with the refgen venv:
    tools/refgen/.venv/bin/python tools/refgen/make_chat_fixtures.py

The published Jinja chat templates of the four built-in families (copied
below from the models' tokenizer_config.json files) are rendered by
transformers' own apply_chat_template on a tokenizer built from the bundled
assets/tokenizers/llama2/tokenizer.json (only bos_token/eos_token matter;
nothing is downloaded). Outputs (tests/fixtures/chat/):
  FAMILY_CASE.txt        the rendered prompt, raw bytes
  config_FAMILY.json     a tokenizer_config.json carrying that template
  config_list.json       chat_template as a list of {name, template}
CASE: conv3 (system + user/assistant/user/assistant/user, generation prompt),
conv3_nogen (the same without the generation prompt), nosys (no system
message, ending with an assistant turn), ws (contents with surrounding
whitespace, which some templates strip).
"""
import json
import os

os.environ["HF_HUB_OFFLINE"] = "1"
from transformers import PreTrainedTokenizerFast  # noqa: E402

OUT = "tests/fixtures/chat"

# meta-llama/Llama-2-7b-chat-hf
LLAMA2 = (
    "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}"
    "{% set system_message = messages[0]['content'] %}{% else %}{% set loop_messages = messages %}"
    "{% set system_message = false %}{% endif %}{% for message in loop_messages %}"
    "{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}"
    "{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}"
    "{% if loop.index0 == 0 and system_message != false %}"
    "{% set content = '<<SYS>>\\n' + system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}"
    "{% else %}{% set content = message['content'] %}{% endif %}"
    "{% if message['role'] == 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}"
    "{% elif message['role'] == 'assistant' %}{{ ' '  + content.strip() + ' ' + eos_token }}{% endif %}{% endfor %}"
)
# meta-llama/Meta-Llama-3-8B-Instruct
LLAMA3 = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}"
    "{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
# teknium/OpenHermes-2.5-Mistral-7B (plain ChatML)
CHATML = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + "
    "'<|im_end|>' + '\n'}}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
# colossal's own fallback format
PLAIN = (
    "{% for message in messages %}{{ message['role'] + ': ' + message['content'] + '\n' }}{% endfor %}"
    "{% if add_generation_prompt %}{{ 'assistant: ' }}{% endif %}"
)

FAMILIES = {
    "llama2": (LLAMA2, "<s>", "</s>"),
    "llama3": (LLAMA3, "<|begin_of_text|>", "<|end_of_text|>"),
    "chatml": (CHATML, "<s>", "</s>"),
    "plain": (PLAIN, "<s>", "</s>"),
}

CONV3 = [
    {"role": "system", "content": "You are a terse assistant.\nAnswer in one line."},
    {"role": "user", "content": "What is 2+2?"},
    {"role": "assistant", "content": "4."},
    {"role": "user", "content": "And the capital of France? Use \"quotes\" & <b>tags</b>."},
    {"role": "assistant", "content": "\"Paris\" \u2014 <b>Paris</b>."},
    {"role": "user", "content": "Thanks!\nBye."},
]
NOSYS = [
    {"role": "user", "content": "Hi"},
    {"role": "assistant", "content": "Hello! How can I help?"},
]
WS = [
    {"role": "system", "content": "  sys with spaces \n"},
    {"role": "user", "content": "\n\t user text  \n"},
    {"role": "assistant", "content": "  answer\u00a0 \n"},
    {"role": "user", "content": " last "},
]
CASES = [("conv3", CONV3, True), ("conv3_nogen", CONV3, False), ("nosys", NOSYS, False), ("ws", WS, True)]


def main():
    tok = PreTrainedTokenizerFast(tokenizer_file="assets/tokenizers/llama2/tokenizer.json")
    os.makedirs(OUT, exist_ok=True)
    for fam, (tmpl, bos, eos) in FAMILIES.items():
        tok.bos_token = bos
        tok.eos_token = eos
        for case, msgs, gen in CASES:
            text = tok.apply_chat_template(msgs, chat_template=tmpl, tokenize=False, add_generation_prompt=gen)
            with open(f"{OUT}/{fam}_{case}.txt", "wb") as f:
                f.write(text.encode("utf-8"))
        if fam != "plain":
            cfg = {"add_bos_token": True, "bos_token": bos, "eos_token": eos, "chat_template": tmpl,
                   "model_max_length": 4096, "tokenizer_class": "PreTrainedTokenizerFast"}
            with open(f"{OUT}/config_{fam}.json", "w") as f:
                json.dump(cfg, f, indent=2)
    cfg = {"bos_token": "<s>", "chat_template": [{"name": "tool_use", "template": "{{ tools }}"},
                                                 {"name": "default", "template": CHATML}]}
    with open(f"{OUT}/config_list.json", "w") as f:
        json.dump(cfg, f, indent=2)


if __name__ == "__main__":
    main()
