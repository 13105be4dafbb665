"""Check colossal-serve with the official openai Python client:
check_serve_openai.py SERVE_BINARY MODEL_DIR [TOKENIZER_DIR]

Starts SERVE_BINARY on MODEL_DIR (with --tokenizer TOKENIZER_DIR when given,
an API key from the environment, a free port), then through openai.OpenAI:
lists the models; asks for a chat completion and a text completion at
temperature 0, whole and streamed (stream_options.include_usage), and checks
each text against transformers' greedy generate() on the same model and
prompt (the chat prompt rendered by the tokenizer's own chat template, the
reply cut at the template's end-of-turn string); checks n=2, a stop string,
the usage counts, and that the client raises its typed errors for a bad
temperature (BadRequestError), an unknown model (NotFoundError) and a wrong
key (AuthenticationError). Exits non-zero on any mismatch.

Example (the chat fixture of tests/test_chat_cli.sh):
    tools/refgen/.venv/bin/python tools/refgen/check_serve_openai.py apps/colossal-serve \\
        tests/fixtures/chat_model/base tests/fixtures/chat_model/chatml
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

import openai  # noqa: E402
import torch  # noqa: E402
from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: E402

KEY = "check-serve-key"
fails = 0


def check(ok: bool, what: str) -> None:
    global fails
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        fails += 1


def greedy(model, tok, ids: list, k: int) -> str:
    with torch.no_grad():
        out = model.generate(torch.tensor([ids]), max_new_tokens=k, do_sample=False, pad_token_id=tok.eos_token_id)
    new = out[0, len(ids):].tolist()
    if tok.eos_token_id in new:
        new = new[: new.index(tok.eos_token_id)]
    return tok.decode(new, skip_special_tokens=False)


def main() -> int:
    serve, model_dir = sys.argv[1], sys.argv[2]
    tok_dir = sys.argv[3] if len(sys.argv) > 3 else model_dir
    tok = AutoTokenizer.from_pretrained(tok_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, torch_dtype=torch.float32)
    model.eval()

    args = [serve, model_dir, "--port", "0", "--parallel", "4"]
    if len(sys.argv) > 3:
        args += ["--tokenizer", tok_dir]
    env = dict(os.environ, COLOSSAL_API_KEY=KEY)
    proc = subprocess.Popen(args, stderr=subprocess.PIPE, text=True, env=env)
    url = None
    t0 = time.time()
    while url is None and time.time() - t0 < 120:
        line = proc.stderr.readline()
        if not line:
            break
        m = re.match(r"colossal-serve: listening on (http://\S+)", line)
        if m:
            url = m.group(1)
    if url is None:
        print("FAIL  the server did not start")
        proc.kill()
        return 1
    print(f"server at {url}")
    log = []  # the access log, read on so that the pipe never fills
    threading.Thread(target=lambda: log.extend(proc.stderr), daemon=True).start()
    try:
        client = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
        name = os.path.basename(os.path.normpath(model_dir))
        ids = [m.id for m in client.models.list()]
        check(ids == [name], f"models.list(): {ids}")

        # text completion, whole and streamed
        prompt, k = "The cat", 24
        want = greedy(model, tok, tok(prompt)["input_ids"], k)
        r = client.completions.create(model=name, prompt=prompt, max_tokens=k, temperature=0)
        check(r.choices[0].text == want, f"completions.create: {r.choices[0].text!r} (transformers {want!r})")
        n_prompt = len(tok(prompt)["input_ids"])
        check(r.usage.prompt_tokens == n_prompt and r.usage.completion_tokens == k and
              r.usage.total_tokens == n_prompt + k, f"... usage {r.usage}")
        text, usage = "", None
        for chunk in client.completions.create(model=name, prompt=prompt, max_tokens=k, temperature=0, stream=True,
                                               stream_options={"include_usage": True}):
            if chunk.choices:
                text += chunk.choices[0].text
            if chunk.usage:
                usage = chunk.usage
        check(text == want, f"completions.create(stream=True): {text!r}")
        check(usage is not None and usage.completion_tokens == k, f"... the usage chunk: {usage}")
        r = client.completions.create(model=name, prompt=prompt, max_tokens=k, temperature=0, n=2)
        check([c.text for c in r.choices] == [want, want] and r.usage.completion_tokens == 2 * k,
              f"n=2: two greedy texts, {r.usage.completion_tokens} tokens")
        stop = want.split()[1] if len(want.split()) > 1 else want[-2:]
        r = client.completions.create(model=name, prompt=prompt, max_tokens=k, temperature=0, stop=[stop])
        check(r.choices[0].text == want[: want.index(stop)] and r.choices[0].finish_reason == "stop",
              f"stop={stop!r}: {r.choices[0].text!r}, finish {r.choices[0].finish_reason}")

        # chat, whole and streamed
        if tok.chat_template:
            msgs = [{"role": "user", "content": "hello"}]
            p_ids = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True)
            if isinstance(p_ids, dict) or hasattr(p_ids, "input_ids"):
                p_ids = p_ids["input_ids"]
            k = 40
            full = greedy(model, tok, p_ids, k)
            want = full.split("<|im_end|>")[0]
            r = client.chat.completions.create(model=name, messages=msgs, max_tokens=k, temperature=0)
            got = r.choices[0].message.content
            check(got == want and r.choices[0].message.role == "assistant",
                  f"chat.completions.create: {got!r} (transformers {want!r})")
            check(r.usage.prompt_tokens == len(p_ids), f"... {r.usage.prompt_tokens} prompt tokens "
                  f"(the template's {len(p_ids)})")
            text, role, finish = "", None, None
            for chunk in client.chat.completions.create(model=name, messages=msgs, max_tokens=k, temperature=0,
                                                        stream=True):
                d = chunk.choices[0].delta
                role = role or d.role
                text += d.content or ""
                finish = chunk.choices[0].finish_reason or finish
            check(text == want and role == "assistant" and finish == r.choices[0].finish_reason,
                  f"chat.completions.create(stream=True): {text!r}, role {role}, finish {finish}")
        else:
            print("skip  chat: the tokenizer has no chat template")

        # the client's typed errors
        try:
            client.completions.create(model=name, prompt=prompt, temperature=5)
            check(False, "temperature 5 raised nothing")
        except openai.BadRequestError as e:
            check(e.status_code == 400 and e.body.get("param") == "temperature", f"temperature 5: BadRequestError "
                  f"({e.body.get('message')})")
        try:
            client.completions.create(model="no-such-model", prompt=prompt)
            check(False, "an unknown model raised nothing")
        except openai.NotFoundError as e:
            check(e.body.get("code") == "model_not_found", f"an unknown model: NotFoundError ({e.body.get('message')})")
        try:
            openai.OpenAI(base_url=url + "/v1", api_key="wrong", max_retries=0).models.list()
            check(False, "a wrong key raised nothing")
        except openai.AuthenticationError as e:
            check(e.status_code == 401, "a wrong key: AuthenticationError")
    finally:
        proc.send_signal(signal.SIGTERM)
        rc = proc.wait(timeout=60)
        check(rc == 0, f"SIGTERM: the server exits {rc}")
        check(sum(" /v1/" in line for line in log) >= 10, f"{len(log)} lines on stderr, one per request")
    print(f"{'FAILED' if fails else 'all checks passed'} ({fails} failures)")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
