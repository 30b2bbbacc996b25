"""The official MCP Python SDK against mnemo, as an MCP host uses it. Run by tests/mcp.rs:

    python mcp_client.py stdio MNEMO_BINARY STORE
    python mcp_client.py http URL TOKEN SCOPED_TOKEN

`stdio` starts `MNEMO_BINARY mcp --memory-path STORE` (the SDK's stdio client); the store
holds "The user's dog is called Rex." in conversation `mcp`. `http` talks to a running
`mnemo serve` at URL/mcp with bearer TOKEN (full access); SCOPED_TOKEN may only touch
conversation `other`. There, the proxy has already run a chat session `s1` in conversation
`mcp`: the user said "My cat is called Miso." (learnt as a fact and summarised) and a tool
output `call_9` was offloaded.

Both initialize, list the tools and resources, call every tool, read the resources, and check
that a bad call of each tool is a tool error with a clear message. Both leave "The user
drinks tea, not coffee." in conversation `mcp` for the caller to find. Exits non-zero (with
the check that failed) when mnemo does not behave as an MCP server should; prints
"mcp MODE: ok" last, after every check, which the Rust test requires.
"""

import json
import os
import sys

import anyio
import httpx2
from mcp import ClientSession, StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from checks import check, fail

TOOLS = {
    "search_memories",
    "add_memory",
    "list_memories",
    "get_memory",
    "delete_memory",
    "memory_history",
    "search_conversation_history",
    "read_agent_memory",
    "write_agent_memory",
    "update_agent_memory",
    "read_offloaded_output",
    "list_conflicts",
    "resolve_conflict",
}
UNKNOWN_ID = "6f1c2d1e-8f8a-4c53-9a0e-2b7c1d9e4f00"


def text_of(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def call(session: ClientSession, tool: str, arguments: dict) -> dict:
    """A successful call's structured answer (the same JSON as its text)."""
    result = await session.call_tool(tool, arguments)
    check(not result.is_error, f"{tool} {arguments} failed: {text_of(result)}")
    check(result.structured_content is not None, f"{tool} gave no structured content")
    check(json.loads(text_of(result)) == result.structured_content, tool)
    return result.structured_content


async def refused(session: ClientSession, tool: str, arguments: dict, words: str) -> None:
    """A call mnemo must refuse as a tool error whose message says `words`."""
    result = await session.call_tool(tool, arguments)
    message = text_of(result)
    check(result.is_error, f"{tool} {arguments} was accepted: {message}")
    check(words in message, f"{tool} {arguments}: {message!r} does not say {words!r}")


async def tools_are_described(session: ClientSession) -> None:
    init = await session.initialize()
    check(init.server_info.name == "mnemo", init.server_info)
    check(init.capabilities.tools is not None, init.capabilities)
    check(init.capabilities.resources is not None, init.capabilities)
    tools = {t.name: t for t in (await session.list_tools()).tools}
    check(set(tools) == TOOLS, sorted(tools))
    for tool in tools.values():
        check(tool.description, f"{tool.name} has no description")
        check(tool.input_schema.get("type") == "object", tool.input_schema)
        check(tool.output_schema, f"{tool.name} has no output schema")
        for name, prop in tool.input_schema.get("properties", {}).items():
            check(prop.get("description"), f"{tool.name}.{name} is not described")
    search_props = tools["search_memories"].input_schema["properties"]
    for name in ("query", "conversation", "top_k", "filter", "recency"):
        check(name in search_props, f"search_memories lacks {name}")
    check("metadata" in tools["add_memory"].input_schema["properties"], '"metadata" in tools["add_memory"].input_schema["properties"]')


async def memory_tools(session: ClientSession, store_dir: str | None) -> None:
    """Every long-term memory tool, good calls and bad."""
    added = await call(
        session,
        "add_memory",
        {
            "content": "The user's sister lives in Oslo.",
            "conversation": "mcp",
            "metadata": {"topic": "family"},
        },
    )
    check(added["conversation_id"] == "mcp", added)
    check(len(added["added"]) == 1, added)
    memory = added["added"][0]
    memory_id = memory["id"]
    check(memory["metadata"] == {"topic": "family"}, memory)
    check(not os.path.isabs(memory["path"]), memory["path"])
    check(isinstance(added["updated"], list), added)

    found = await call(
        session,
        "search_memories",
        {"query": "Where does the user's sister live?", "conversation": "mcp", "top_k": 5},
    )
    check(found["hits"], found)
    check(found["hits"][0]["id"] == memory_id, found)
    check(not os.path.isabs(found["hits"][0]["path"]), found["hits"][0]["path"])
    # The metadata is a filter.
    filtered = await call(
        session,
        "search_memories",
        {"query": "pets", "conversation": "mcp", "filter": {"topic": "family"}},
    )
    check([h["id"] for h in filtered["hits"]] == [memory_id], filtered)

    got = await call(session, "get_memory", {"id": memory_id})
    check(got["content"] == "The user's sister lives in Oslo.", got)

    page = await call(
        session, "list_memories", {"conversation": "mcp", "role": "memory", "limit": 10}
    )
    total = page["total"]
    check(total >= 2, page)
    check(memory_id in [m["id"] for m in page["items"]], page)
    one = await call(
        session, "list_memories", {"conversation": "mcp", "role": "memory", "offset": 1, "limit": 1}
    )
    check(one["total"] == total and len(one["items"]) == 1, one)
    check(one["items"][0]["id"] == page["items"][1]["id"], one)

    history = await call(session, "memory_history", {"id": memory_id, "limit": 5})
    check(history["versions"], history)
    check("Oslo" in history["versions"][0]["content"], history)

    deleted = await call(session, "delete_memory", {"id": memory_id})
    check(deleted["deleted"] == memory_id, deleted)
    check(deleted["tombstone"].startswith("entries/mcp/deleted/"), deleted)
    page = await call(session, "list_memories", {"conversation": "mcp", "role": "memory"})
    check(page["total"] == total - 1, page)
    # A deleted memory's history is still in git.
    history = await call(session, "memory_history", {"id": memory_id})
    check(len(history["versions"]) >= 2, history)

    # One bad call per tool: a tool error the model can read, nothing written.
    await refused(session, "search_memories", {"query": "x", "conversation": "../x"}, "../x")
    await refused(session, "search_memories", {"query": "x", "top_k": 1000}, "top_k")
    await refused(
        session, "search_memories", {"query": "x", "filter": "topic"}, "a filter must be a JSON object"
    )
    await refused(session, "add_memory", {"content": "escape", "conversation": "../x"}, "../x")
    await refused(session, "add_memory", {"content": "   "}, "empty")
    deep: dict = {}
    for _ in range(40):
        deep = {"d": deep}
    await refused(session, "add_memory", {"content": "deep", "metadata": deep}, "levels")
    await refused(session, "list_memories", {"conversation": "../x"}, "../x")
    await refused(session, "list_memories", {"limit": 1000000}, "limit")
    await refused(session, "get_memory", {"id": UNKNOWN_ID}, f"no memory {UNKNOWN_ID}")
    await refused(session, "get_memory", {"id": "../x"}, "../x")
    await refused(session, "delete_memory", {"id": UNKNOWN_ID}, f"no memory {UNKNOWN_ID}")
    await refused(session, "memory_history", {"id": UNKNOWN_ID}, "no history")
    # Arguments that do not fit the schema are a tool error too, naming the field.
    await refused(session, "search_memories", {"query": "x", "unknown": 1}, "unknown field `unknown`")
    await refused(session, "get_memory", {}, "missing field `id`")
    if store_dir is not None:
        check(not os.path.exists(os.path.join(os.path.dirname(store_dir), "x")), "wrote outside")


async def conflict_tools(session: ClientSession) -> None:
    """A later value marks the earlier; the pair is listed and resolved through the tools."""
    for text in ["I live in Ghent.", "I keep bees.", "I live in Leuven."]:
        await call(session, "add_memory", {"content": text, "conversation": "moves"})
    listed = await call(session, "list_conflicts", {"conversation": "moves"})
    check(listed["conversation_id"] == "moves", listed)
    check(len(listed["conflicts"]) == 1, listed)
    pair = listed["conflicts"][0]
    check(pair["earlier"]["content"] == "I live in Ghent.", pair)
    check(pair["later"]["content"] == "I live in Leuven.", pair)
    earlier, later = pair["earlier"]["id"], pair["later"]["id"]
    await refused(
        session,
        "resolve_conflict",
        {"conversation": "moves", "earlier": later, "later": earlier, "resolution": "keep_later"},
        "no conflict between",
    )
    await refused(
        session,
        "resolve_conflict",
        {"conversation": "moves", "earlier": earlier, "later": later, "resolution": "newest"},
        "unknown variant",
    )
    resolved = await call(
        session,
        "resolve_conflict",
        {"conversation": "moves", "earlier": earlier, "later": later, "resolution": "keep_later"},
    )
    check(resolved["retired"]["id"] == earlier, resolved)
    check(resolved["retired"]["replaced_by"] == later, resolved)
    check("later fact holds" in resolved["retired"]["reason"], resolved)
    check((await call(session, "list_conflicts", {"conversation": "moves"}))["conflicts"] == [], "resolved")


async def agent_tools(session: ClientSession) -> None:
    empty = await call(session, "read_agent_memory", {"agent": "coder"})
    check(empty["content"] == "", empty)
    notes = await call(
        session, "write_agent_memory", {"agent": "coder", "text": "The build uses cargo."}
    )
    check(notes["path"] == "agents/coder/MEMORY.md", notes)
    check("The build uses cargo." in notes["content"], notes)
    notes = await call(
        session,
        "update_agent_memory",
        {"agent": "coder", "old_text": "cargo", "new_text": "cargo and make"},
    )
    check("The build uses cargo and make." in notes["content"], notes)
    check((await call(session, "read_agent_memory", {"agent": "coder"}))["content"] == notes["content"], '(await call(session, "read_agent_memory", {"agent": "coder"}))["content"] == notes["content"]')
    await refused(session, "read_agent_memory", {"agent": "../etc"}, "agent name")
    await refused(session, "write_agent_memory", {"agent": "coder", "text": "  "}, "empty")
    await refused(
        session,
        "update_agent_memory",
        {"agent": "coder", "old_text": "not there", "new_text": "x"},
        "is not in agents/coder/MEMORY.md",
    )


async def resources(session: ClientSession, summary_of: str | None) -> None:
    listed = {str(r.uri): r for r in (await session.list_resources()).resources}
    check("mnemo://agents/coder/MEMORY.md" in listed, sorted(listed))
    templates = {t.uri_template for t in (await session.list_resource_templates()).resource_templates}
    check(templates == {
        "mnemo://conversations/{conversation}/summary",
        "mnemo://agents/{agent}/MEMORY.md",
    }, templates)
    notes = await session.read_resource("mnemo://agents/coder/MEMORY.md")
    check("cargo and make" in notes.contents[0].text, notes)
    check(notes.contents[0].mime_type == "text/markdown", notes)
    if summary_of is not None:
        uri = "mnemo://conversations/mcp/summary"
        check(uri in listed, sorted(listed))
        summary = await session.read_resource(uri)
        check(summary_of in summary.contents[0].text, summary)
    for uri, words in [
        ("mnemo://conversations/nothing-here/summary", "no summary"),
        ("mnemo://conversations/../x/summary", "../x"),
        ("file:///etc/passwd", "unknown resource"),
    ]:
        try:
            await session.read_resource(uri)
        except Exception as error:  # the SDK raises the server's JSON-RPC error
            check(words in str(error), f"{uri}: {error}")
        else:
            fail(f"{uri} was read")


async def stdio_mode(binary: str, store: str) -> None:
    # mnemo's settings (MNEMO_*) and the log filter pass through; the SDK's default
    # environment for a server holds little else.
    env = {k: v for k, v in os.environ.items() if k.startswith("MNEMO_") or k == "RUST_LOG"}
    server = StdioServerParameters(
        command=binary, args=["mcp", "--memory-path", store], env=env, cwd=os.getcwd()
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await tools_are_described(session)
            # What the command line added is found over MCP.
            found = await call(
                session, "search_memories", {"query": "What is the dog called?", "conversation": "mcp"}
            )
            check("Rex" in found["hits"][0]["content"], found)
            await memory_tools(session, store)
            await conflict_tools(session)
            await agent_tools(session)
            await resources(session, None)
            # No session was ever logged in this store: nothing found, and said so.
            excerpts = await call(
                session, "search_conversation_history", {"query": "cat", "conversation": "mcp"}
            )
            check(excerpts["excerpts"] == [], excerpts)
            await refused(
                session, "search_conversation_history", {"query": "cat", "session": "nope"}, "nope"
            )
            await refused(
                session, "read_offloaded_output", {"call_id": "call_1"}, "no offloaded output"
            )
            await call(
                session,
                "add_memory",
                {"content": "The user drinks tea, not coffee.", "conversation": "mcp"},
            )


def client(url: str, token: str | None):
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    return streamable_http_client(
        f"{url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=60, trust_env=False)
    )


async def http_mode(url: str, token: str, scoped: str) -> None:
    async with client(url, token) as (read, write):
        async with ClientSession(read, write) as session:
            await tools_are_described(session)
            # What the proxy learnt from the chat is found over MCP.
            found = await call(
                session, "search_memories", {"query": "What is the cat called?", "conversation": "mcp"}
            )
            check("Miso" in found["hits"][0]["content"], found)
            await memory_tools(session, None)
            await conflict_tools(session)
            await agent_tools(session)
            await resources(session, "Miso")

            excerpts = await call(
                session, "search_conversation_history", {"query": "Miso", "session": "s1"}
            )
            check(excerpts["excerpts"], excerpts)
            check("Miso" in excerpts["excerpts"][0]["text"], excerpts)
            check(excerpts["excerpts"][0]["session"] == "s1", excerpts)
            await refused(
                session,
                "search_conversation_history",
                {"query": "Miso", "session": "s1", "conversation": "mcp"},
                "not both",
            )
            part = await call(
                session,
                "read_offloaded_output",
                {"call_id": "call_9", "session": "s1", "offset": 7, "limit": 6},
            )
            check(part["text"] == "line 1", part)
            check(part["total_chars"] > 1000, part)
            await refused(
                session,
                "read_offloaded_output",
                {"call_id": "call_9", "session": "s1", "limit": 0},
                "limit must be between",
            )
            await call(
                session,
                "add_memory",
                {"content": "The user drinks tea, not coffee.", "conversation": "mcp"},
            )

    # A token scoped to conversation `other` is refused everything of `mcp`, with the REST
    # API's words, and sees none of it.
    async with client(url, scoped) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            words = 'this token may not read conversation "mcp"'
            await refused(session, "search_memories", {"query": "cat", "conversation": "mcp"}, words)
            await refused(session, "list_memories", {"conversation": "mcp"}, words)
            await refused(
                session, "add_memory", {"content": "x", "conversation": "mcp"},
                'this token may not write conversation "mcp"',
            )
            await refused(session, "search_conversation_history", {"query": "Miso", "session": "s1"}, words)
            await refused(
                session, "read_offloaded_output", {"call_id": "call_9", "session": "s1"}, words
            )
            await refused(session, "read_agent_memory", {"agent": "coder"}, "may not use the notes")
            page = await call(session, "list_memories", {})
            check(page["total"] == 0, page)
            listed = [str(r.uri) for r in (await session.list_resources()).resources]
            check(listed == [], listed)
            try:
                await session.read_resource("mnemo://conversations/mcp/summary")
            except Exception as error:
                check(words in str(error), error)
            else:
                fail("a scoped token read another conversation's summary")
            mine = await call(session, "add_memory", {"content": "Other's fact.", "conversation": "other"})
            check(mine["added"], mine)

    # Without a token, the endpoint answers 401 before any MCP.
    async with httpx2.AsyncClient(trust_env=False) as http:
        response = await http.post(
            f"{url}/mcp",
            json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
            headers={"Accept": "application/json, text/event-stream"},
        )
        check(response.status_code == 401, response.text)


def main() -> None:
    mode = sys.argv[1]
    if mode == "stdio":
        anyio.run(stdio_mode, sys.argv[2], sys.argv[3])
    elif mode == "http":
        anyio.run(http_mode, sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        raise SystemExit(f"unknown mode {mode!r}")
    print(f"mcp {mode}: ok")


main()
