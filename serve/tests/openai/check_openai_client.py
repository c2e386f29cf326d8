"""The official `openai` Python client against `ferrograd-serve --llm` on loopback.

    pip install openai
    cargo run --release -p ferrograd-serve -- --llm DIR --port 8000 &
    python serve/tests/openai/check_openai_client.py http://127.0.0.1:8000/v1

Checks completions and chat completions, streamed and not (text, finish reasons, usage),
stop strings, seeds, the error the client raises for a too-long request, and
`models.list()`. Exits non-zero on the first mismatch. CI runs it over a random fixture
model (`.ci/openai_client.sh`), beside the same cases with a Rust client in
`serve/tests/llm.rs`.
"""
import sys

import openai

base = sys.argv[1] if len(sys.argv) > 1 else "http://127.0.0.1:8000/v1"
client = openai.OpenAI(base_url=base, api_key="unused")
model = client.models.list().data[0].id
print("model:", model)

# Completions: whole and streamed give the same greedy text.
whole = client.completions.create(model=model, prompt="w4 w5 w6", max_tokens=8, temperature=0)
text = whole.choices[0].text
assert whole.object == "text_completion", whole
assert whole.usage.completion_tokens >= 1 and whole.usage.total_tokens == (
    whole.usage.prompt_tokens + whole.usage.completion_tokens
), whole.usage
chunks = list(
    client.completions.create(
        model=model, prompt="w4 w5 w6", max_tokens=8, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
)
streamed = "".join(c.choices[0].text for c in chunks if c.choices)
assert streamed == text, (streamed, text)
assert chunks[-1].usage.completion_tokens == whole.usage.completion_tokens, chunks[-1]
print("completion:", repr(text), whole.choices[0].finish_reason, whole.usage)

# Chat: the template is applied; streamed deltas add up to the same message.
messages = [{"role": "system", "content": " w7 "}, {"role": "user", "content": "w8 w9"}]
chat = client.chat.completions.create(model=model, messages=messages, max_tokens=6, temperature=0)
content = chat.choices[0].message.content
assert chat.choices[0].message.role == "assistant", chat
parts = [
    c.choices[0].delta.content or ""
    for c in client.chat.completions.create(
        model=model, messages=messages, max_tokens=6, temperature=0, stream=True
    )
    if c.choices
]
assert "".join(parts) == content, (parts, content)
print("chat:", repr(content), chat.choices[0].finish_reason)

# A stop string cuts the text before it.
words = text.split()
if len(words) >= 3:
    cut = client.completions.create(
        model=model, prompt="w4 w5 w6", max_tokens=8, temperature=0, stop=[words[2]]
    )
    assert cut.choices[0].text == text[: text.find(words[2])], cut
    assert cut.choices[0].finish_reason == "stop", cut
    print("stop:", repr(cut.choices[0].text))

# A seed repeats a sampled answer.
a, b = (
    client.completions.create(model=model, prompt="w10", max_tokens=8, temperature=1.0, seed=7)
    .choices[0]
    .text
    for _ in range(2)
)
assert a == b, (a, b)

# A request past the context is the client's BadRequestError.
try:
    client.completions.create(model=model, prompt="w1", max_tokens=100000)
    raise SystemExit("a request past the context was accepted")
except openai.BadRequestError as e:
    assert "maximum context length" in str(e), e
print("all checks passed with openai", openai.__version__)
