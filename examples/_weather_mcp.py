"""The MCP tool server of examples/agents.py: one tool, get_weather, over stdio (the ``mcp`` SDK)."""

from mcp.server.mcpserver import MCPServer

server = MCPServer("weather")


@server.tool()
def get_weather(city: str) -> str:
    """Current weather in a city."""
    return f"sunny, 21 C in {city}"


if __name__ == "__main__":
    server.run("stdio")
