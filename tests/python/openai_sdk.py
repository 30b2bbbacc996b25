"""The official openai Python SDK against `mnemo serve`: `python openai_sdk.py BASE_URL`.

Run by tests/openai_sdk.rs, with mnemo in front of a scripted upstream that echoes. Exits
non-zero (with the assertion that failed) when mnemo does not behave like an OpenAI server.
"""

import sys

import openai

base_url = sys.argv[1]
client = openai.OpenAI(base_url=f"{base_url}/v1", api_key="sk-unused", max_retries=0)

# A plain chat, with mnemo's own fields passed as extra body fields.
first = client.chat.completions.create(
    model="scripted",
    messages=[{"role": "user", "content": "My sister lives in Oslo."}],
    extra_body={"memory_id": "sdk"},
)
assert first.choices[0].message.content, first

# The memory is injected into the next request, and reported in memory_hits.
second = client.chat.completions.create(
    model="scripted",
    messages=[{"role": "user", "content": "Where does my sister live?"}],
    extra_body={"memory_id": "sdk", "memory_top_k": 3},
)
hits = (second.model_extra or {}).get("memory_hits")
assert isinstance(hits, list) and hits, second
assert any("Oslo" in h["content"] for h in hits), hits
assert "Oslo" in second.choices[0].message.content, second.choices[0].message.content

# Streaming: chunks arrive and add up to the answer.
stream = client.chat.completions.create(
    model="scripted",
    messages=[{"role": "user", "content": "Say something."}],
    stream=True,
    extra_body={"memory_id": "sdk"},
)
text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
assert text, "the stream carried no text"

# A passed-through endpoint.
models = client.models.list()
assert [m.id for m in models.data], models

# Errors come back as OpenAI errors.
try:
    client.chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": "hi"}],
        extra_body={"memory_id": "../../etc"},
    )
except openai.BadRequestError as e:
    assert "memory_id" in str(e), e
else:
    raise AssertionError("a hostile memory_id was accepted")

print("openai sdk: ok")
