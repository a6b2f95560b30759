"""A real MCP tool server for the tests, written with the ``mcp`` SDK.

    python tests/mcp_server.py stdio
    python tests/mcp_server.py http PORT        # streamable HTTP on 127.0.0.1:PORT/mcp

Tools: ``get_weather(city)`` (text; as the trained tiny model learnt it), ``add(a, b)``
(structured), ``fail(why)`` (a tool error), ``slow(seconds)`` (sleeps), ``die()`` (the process exits
mid-call). With ``MCP_PID_FILE`` set, the process writes its pid there.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from typing import Annotated

from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from pydantic import BaseModel, Field

server = MCPServer("unillm-test-tools")


class Sum(BaseModel):
    total: int


#: Bounded: a call forced by a JSON schema then always fits in max_tokens, whatever a tiny model
#: trained on another CPU writes for the city.
City = Annotated[str, Field(max_length=32)]


@server.tool()
def get_weather(city: City) -> str:
    """Get the current weather in a city."""
    return json.dumps({"city": city, "forecast": "snowy", "temperature": 2})


@server.tool()
def add(a: int, b: int) -> Sum:
    """Add two numbers."""
    return Sum(total=a + b)


@server.tool()
def fail(why: str) -> str:
    """Always fails."""
    raise ToolError(f"no luck: {why}")


@server.tool()
async def slow(seconds: float) -> str:
    """Sleep, then answer."""
    await asyncio.sleep(seconds)
    return "done"


@server.tool()
def die() -> str:
    """The server process exits while answering."""
    os._exit(3)


if __name__ == "__main__":
    if os.environ.get("MCP_PID_FILE"):  # the tests check the process is gone after a loop
        with open(os.environ["MCP_PID_FILE"], "w") as f:
            f.write(str(os.getpid()))
    if sys.argv[1:2] == ["http"]:
        server.run("streamable-http", host="127.0.0.1", port=int(sys.argv[2]))
    else:
        server.run("stdio")
