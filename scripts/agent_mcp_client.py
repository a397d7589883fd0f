"""Asks `ingero-agent mcp` through the official MCP Python client (the `mcp` package) and prints
what it answered as one JSON object, for agent/src/mcp_tests.rs to check.

    python agent_mcp_client.py http http://127.0.0.1:PORT/mcp
    python agent_mcp_client.py stdio /path/to/ingero-agent mcp --db ... --nodes ...
"""

import asyncio
import json
import sys

import httpx2 as httpx  # the transport the mcp package is built on
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client


def answer(result):
    text = result.content[0].text if result.content else ""
    return {"is_error": bool(result.is_error), "text": text, "structured": result.structured_content}


async def session_calls(s):
    out = {}
    init = await s.initialize()
    out["server"] = init.server_info.name
    out["tools"] = sorted(t.name for t in (await s.list_tools()).tools)
    out["sql"] = answer(await s.call_tool(
        "query_fleet", {"action": "sql", "query": "SELECT count(*) AS n FROM events", "since": "1h"}))
    out["chains"] = answer(await s.call_tool("query_fleet", {"action": "chains", "since": "1h"}))
    out["ops"] = answer(await s.call_tool("query_fleet", {"action": "ops", "since": "1h"}))
    out["overview"] = answer(await s.call_tool("query_fleet", {"action": "overview"}))
    out["bad_action"] = answer(await s.call_tool("query_fleet", {"action": "drop"}))
    out["hostile"] = answer(await s.call_tool("query_fleet", {"action": "sql", "query": "DELETE FROM events"}))
    out["local_overview"] = answer(await s.call_tool("get_overview", {}))
    out["local_chains"] = answer(await s.call_tool("get_causal_chains", {"since": "1h"}))
    out["local_sql"] = answer(await s.call_tool("run_sql", {"query": "SELECT count(*) AS n FROM events"}))
    out["local_stats"] = answer(await s.call_tool("get_trace_stats", {"since": "1h"}))
    return out


async def over_http(url):
    async with httpx.AsyncClient(timeout=30) as http:
        async with streamable_http_client(url, http_client=http) as (read, write):
            async with ClientSession(read, write) as s:
                return await session_calls(s)


async def over_stdio(argv):
    params = StdioServerParameters(command=argv[0], args=argv[1:])
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as s:
            return await session_calls(s)


def main():
    mode = sys.argv[1]
    if mode == "http":
        out = asyncio.run(over_http(sys.argv[2]))
    else:
        out = asyncio.run(over_stdio(sys.argv[2:]))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
