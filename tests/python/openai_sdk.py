"""The official openai Python SDK against `mnemo serve`: `python openai_sdk.py BASE_URL TOKEN`.

Run by tests/openai_sdk.rs, with mnemo in front of a scripted upstream that echoes. Exits
non-zero (with the check that failed) when mnemo does not behave like an OpenAI server; prints
"openai sdk: ok" last, after every check, which the Rust test requires.
"""

import json
import sys
import urllib.request

import openai

from checks import check, fail

base_url = sys.argv[1]
token = sys.argv[2]
# mnemo's bearer token is the SDK's api_key.
client = openai.OpenAI(base_url=f"{base_url}/v1", api_key=token, max_retries=0)

# Another key is refused as the OpenAI API would: a 401 the SDK raises as such.
stranger = openai.OpenAI(base_url=f"{base_url}/v1", api_key="sk-not-a-mnemo-token", max_retries=0)
try:
    stranger.chat.completions.create(
        model="scripted", messages=[{"role": "user", "content": "hi"}], extra_body={"memory_id": "sdk"}
    )
except openai.AuthenticationError as e:
    check(e.code == "unauthorized", (e.code, e))
    check("not one mnemo knows" in str(e), e)
else:
    fail("an unknown token was accepted")

# A plain chat, with mnemo's own fields passed as extra body fields.
first = client.chat.completions.create(
    model="scripted",
    messages=[{"role": "user", "content": "My sister lives in Oslo."}],
    extra_body={"memory_id": "sdk"},
)
check(first.choices[0].message.content, first)

# The memory is injected into the next request, and reported in memory_hits.
second = client.chat.completions.create(
    model="scripted",
    messages=[{"role": "user", "content": "Where does my sister live?"}],
    extra_body={"memory_id": "sdk", "memory_top_k": 3},
)
hits = (second.model_extra or {}).get("memory_hits")
check(isinstance(hits, list) and hits, second)
check(any("Oslo" in h["content"] for h in hits), hits)
check("Oslo" in second.choices[0].message.content, second.choices[0].message.content)

# Streaming: chunks arrive and add up to the answer.
stream = client.chat.completions.create(
    model="scripted",
    messages=[{"role": "user", "content": "Say something."}],
    stream=True,
    extra_body={"memory_id": "sdk"},
)
text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
check(text, "the stream carried no text")

# A passed-through endpoint.
models = client.models.list()
check([m.id for m in models.data], models)

# Errors come back as OpenAI errors.
try:
    client.chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": "hi"}],
        extra_body={"memory_id": "../../etc"},
    )
except openai.BadRequestError as e:
    check("memory_id" in str(e), e)
else:
    fail("a hostile memory_id was accepted")

# Context governance: a tool-heavy history of 200 messages, resent whole as agents do, with
# `mode: auto`. The answer reports what was saved; the upstream gets a smaller request.
def tool_history():
    messages = [{"role": "system", "content": "You are a coding agent with a read_file tool."}]
    for turn in range(50):
        call_id = f"call_{turn}"
        # One output larger than the offload limit (20000 tokens = 80000 characters).
        size = 100_000 if turn == 10 else 1_000 + (turn * 977) % 6_000
        output = "\n".join(f"{turn}:{line} fn item_{line}() {{ }}" for line in range(size // 24))
        messages.append({"role": "user", "content": f"Read file {turn} and tell me what it does."})
        messages.append({
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": call_id, "type": "function",
                            "function": {"name": "read_file",
                                         "arguments": f'{{"path": "src/file_{turn}.rs"}}'}}],
        })
        messages.append({"role": "tool", "tool_call_id": call_id, "content": output})
        if turn < 49:
            messages.append({"role": "assistant", "content": f"File {turn} defines helpers."})
    return messages


history = tool_history()
check(len(history) == 200, len(history))
governed = client.chat.completions.create(
    model="scripted",
    messages=history,
    extra_body={"memory_id": "sdk-tools", "memory_top_k": 0,
                "memory_strategy": {"mode": "auto", "context_window_tokens": 50000, "keep": {"messages": 8}}},
)
report = (governed.model_extra or {}).get("memory_context")
check(report, governed)
check(report["tokens_after"] < report["tokens_before"] / 2, report)
for stage in ("offload", "compact", "summarize"):
    check(stage in report["stages"], report)
check(report["offloaded"] == ["call_10"], report)
check(report["summary"] == "new", report)

# Resent as it was: the summary is reused, not paid for again.
again = client.chat.completions.create(
    model="scripted",
    messages=history,
    extra_body={"memory_id": "sdk-tools", "memory_top_k": 0,
                "memory_strategy": {"mode": "auto", "context_window_tokens": 50000, "keep": {"messages": 8}}},
)
check(again.model_extra["memory_context"]["summary"] == "reused", again.model_extra)

# Even governed, it cannot fit a tiny window: a clear 400 before any upstream call.
try:
    client.chat.completions.create(
        model="scripted",
        messages=history,
        extra_body={"memory_id": "sdk-tools", "memory_top_k": 0,
                    "memory_strategy": {"mode": "none", "context_window_tokens": 4000}},
    )
except openai.BadRequestError as e:
    check(e.code == "context_length_exceeded", (e.code, e))
    check("context window is 4000 tokens" in str(e), e)
else:
    fail("a request over the window was forwarded")

# A strategy with an unknown field is refused, naming it.
try:
    client.chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": "hi"}],
        extra_body={"memory_id": "sdk-tools", "memory_strategy": {"mdoe": "auto"}},
    )
except openai.BadRequestError as e:
    check("memory_strategy: mdoe" in str(e), e)
else:
    fail("an unknown strategy field was accepted")

# Server-side history: three calls, each sending only the new message; mnemo keeps the
# session and the upstream gets the whole conversation (checked by tests/openai_sdk.rs).
for text in ["Session one: my cat is Tom.", "Session two: my dog is Rex.", "Session three: their names?"]:
    turn = client.chat.completions.create(
        model="scripted",
        messages=[{"role": "user", "content": text}],
        extra_body={"memory_session": "sdk-session", "memory_top_k": 0},
    )
    check(turn.choices[0].message.content, turn)
session = urllib.request.Request(
    f"{base_url}/v1/sessions/sdk-session/messages", headers={"Authorization": f"Bearer {token}"}
)
with urllib.request.urlopen(session) as response:
    page = json.load(response)
check(page["total"] == 6, page)
check([m["message"]["role"] for m in page["messages"]] == ["user", "assistant"] * 3, page)

print("openai sdk: ok")
