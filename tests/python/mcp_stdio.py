"""The official MCP Python SDK against `mnemo mcp`: `python mcp_stdio.py MNEMO_BINARY STORE`.

Run by tests/mcp.rs, on a store where `mnemo add -c mcp` has put "The user's dog is called
Rex."; it leaves "The user drinks tea, not coffee." there for `mnemo search` to find. Starts
`MNEMO_BINARY mcp --memory-path STORE` as an MCP host would (the SDK's stdio client), then
initializes, lists the tools, calls each one, and checks that a bad call of each is a tool
error with a clear message. Exits non-zero (with the assertion
that failed) when mnemo does not behave as an MCP server should.
"""

import json
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters, stdio_client

binary, store = sys.argv[1], sys.argv[2]

TOOLS = {
    "search_memories",
    "add_memory",
    "list_memories",
    "get_memory",
    "delete_memory",
    "memory_history",
}
UNKNOWN_ID = "6f1c2d1e-8f8a-4c53-9a0e-2b7c1d9e4f00"


def text_of(result) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


async def call(session: ClientSession, tool: str, arguments: dict) -> dict:
    """A successful call's structured answer (the same JSON as its text)."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} {arguments} failed: {text_of(result)}"
    assert result.structured_content is not None, f"{tool} gave no structured content"
    assert json.loads(text_of(result)) == result.structured_content, tool
    return result.structured_content


async def refused(session: ClientSession, tool: str, arguments: dict, words: str) -> None:
    """A call mnemo must refuse as a tool error whose message says `words`."""
    result = await session.call_tool(tool, arguments)
    message = text_of(result)
    assert result.is_error, f"{tool} {arguments} was accepted: {message}"
    assert words in message, f"{tool} {arguments}: {message!r} does not say {words!r}"


async def main() -> None:
    # mnemo's settings (MNEMO_*) and the log filter pass through; the SDK's default
    # environment for a server holds little else.
    env = {k: v for k, v in os.environ.items() if k.startswith("MNEMO_") or k == "RUST_LOG"}
    server = StdioServerParameters(
        command=binary, args=["mcp", "--memory-path", store], env=env, cwd=os.getcwd()
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            assert init.server_info.name == "mnemo", init.server_info
            assert init.capabilities.tools is not None, init.capabilities

            tools = {t.name: t for t in (await session.list_tools()).tools}
            assert set(tools) == TOOLS, sorted(tools)
            for tool in tools.values():
                assert tool.description, f"{tool.name} has no description"
                assert tool.input_schema.get("type") == "object", tool.input_schema
                assert tool.output_schema, f"{tool.name} has no output schema"
            search_props = tools["search_memories"].input_schema["properties"]
            for name in ("query", "conversation", "top_k", "filter", "recency"):
                assert name in search_props, f"search_memories lacks {name}"
            assert search_props["query"].get("description"), "parameters are described"

            added = await call(
                session,
                "add_memory",
                {"content": "The user's sister lives in Oslo.", "conversation": "mcp"},
            )
            assert added["conversation_id"] == "mcp", added
            assert len(added["added"]) == 1, added
            memory = added["added"][0]
            memory_id = memory["id"]
            assert not os.path.isabs(memory["path"]), memory["path"]

            found = await call(
                session,
                "search_memories",
                {"query": "Where does the user's sister live?", "conversation": "mcp", "top_k": 5},
            )
            assert found["hits"], found
            assert found["hits"][0]["id"] == memory_id, found
            assert "Oslo" in found["hits"][0]["content"], found
            assert not os.path.isabs(found["hits"][0]["path"]), found["hits"][0]["path"]

            # What the command line added is found over MCP.
            found = await call(
                session,
                "search_memories",
                {"query": "What is the dog called?", "conversation": "mcp"},
            )
            assert "Rex" in found["hits"][0]["content"], found

            got = await call(session, "get_memory", {"id": memory_id})
            assert got["content"] == "The user's sister lives in Oslo.", got

            page = await call(
                session, "list_memories", {"conversation": "mcp", "role": "memory", "limit": 10}
            )
            assert page["total"] == 2, page
            assert memory_id in [m["id"] for m in page["items"]], page
            one = await call(
                session, "list_memories", {"conversation": "mcp", "offset": 1, "limit": 1}
            )
            assert one["total"] == 2 and len(one["items"]) == 1, one
            assert one["items"][0]["id"] == page["items"][1]["id"], one

            history = await call(session, "memory_history", {"id": memory_id})
            assert history["versions"], history
            assert "Oslo" in history["versions"][0]["content"], history

            deleted = await call(session, "delete_memory", {"id": memory_id})
            assert deleted["deleted"] == memory_id, deleted
            assert deleted["tombstone"].startswith("entries/mcp/deleted/"), deleted
            page = await call(session, "list_memories", {"conversation": "mcp"})
            assert page["total"] == 1, page
            assert memory_id not in [m["id"] for m in page["items"]], page
            # A deleted memory's history is still in git.
            history = await call(session, "memory_history", {"id": memory_id})
            assert len(history["versions"]) >= 2, history

            # One bad call per tool: a tool error the model can read, nothing written.
            await refused(
                session, "search_memories", {"query": "x", "conversation": "../x"}, "../x"
            )
            await refused(session, "search_memories", {"query": "x", "top_k": 1000}, "top_k")
            await refused(
                session,
                "search_memories",
                {"query": "x", "filter": "topic"},
                "a filter must be a JSON object",
            )
            await refused(
                session, "add_memory", {"content": "escape", "conversation": "../x"}, "../x"
            )
            await refused(session, "add_memory", {"content": "   "}, "empty")
            await refused(session, "list_memories", {"conversation": "../x"}, "../x")
            await refused(session, "list_memories", {"limit": 1000000}, "limit")
            await refused(session, "get_memory", {"id": UNKNOWN_ID}, f"no memory {UNKNOWN_ID}")
            await refused(session, "get_memory", {"id": "../x"}, "../x")
            await refused(session, "delete_memory", {"id": UNKNOWN_ID}, f"no memory {UNKNOWN_ID}")
            await refused(session, "memory_history", {"id": UNKNOWN_ID}, "no history")
            assert not os.path.exists(os.path.join(os.path.dirname(store), "x")), "wrote outside"

            # Arguments that do not fit the schema are a tool error too, naming the field.
            await refused(
                session, "search_memories", {"query": "x", "unknown": 1}, "unknown field `unknown`"
            )
            await refused(session, "get_memory", {}, "missing field `id`")
            # Left for the command line to find.
            await call(
                session,
                "add_memory",
                {"content": "The user drinks tea, not coffee.", "conversation": "mcp"},
            )
    print("mcp stdio: ok")


anyio.run(main)
