"""Drives `tinybox mcp` with the official MCP Python SDK, as an agent
would, and holds every tool's answer to the schema the tool declares.

The SDK itself validates each successful call's structuredContent against
the tool's outputSchema (ClientSession.validate_tool_result, raising on a
mismatch or a missing structuredContent); this script also checks it
again with jsonschema, directly, so a change in the SDK cannot make the
check vanish. Usage: check.py TINYBOX STORE [SERVER FLAGS...]; prints one
JSON line of what it saw, exits non-zero on any failure.
"""

import asyncio
import base64
import json
import sys

import jsonschema
from mcp import ClientSession, StdioServerParameters, stdio_client


def field(obj, *names):
    """The first attribute or key by any of `names` (the SDK's pydantic names or the wire's)."""
    for name in names:
        if isinstance(obj, dict) and name in obj:
            return obj[name]
        if hasattr(obj, name):
            return getattr(obj, name)
    return None


async def main():
    tinybox, store, flags = sys.argv[1], sys.argv[2], sys.argv[3:]
    params = StdioServerParameters(command=tinybox, args=["--store", store, "mcp", *flags])
    seen = {"validated": []}
    async with stdio_client(params) as streams:
        read, write = streams[0], streams[1]
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            info = field(init, "server_info", "serverInfo")
            seen["server_name"] = field(info, "name")
            listed = await session.list_tools()
            tools = {}
            for tool in field(listed, "tools"):
                schema = field(tool, "output_schema", "outputSchema")
                hints = field(tool, "annotations")
                dumped = hints.model_dump(by_alias=True, exclude_none=True) if hints is not None else {}
                tools[tool.name] = {"schema": schema, "annotations": dumped}
                if schema is not None:
                    jsonschema.Draft202012Validator.check_schema(schema)
            seen["tools"] = {n: t["annotations"] for n, t in tools.items()}
            seen["without_schema"] = sorted(n for n, t in tools.items() if t["schema"] is None)

            async def call(name, arguments):
                result = await session.call_tool(name, arguments)
                if field(result, "is_error", "isError"):
                    raise SystemExit(f"{name}: a tool error: {result}")
                structured = field(result, "structured_content", "structuredContent")
                if structured is None:
                    raise SystemExit(f"{name}: no structuredContent")
                jsonschema.validate(structured, tools[name]["schema"])
                text = field(result.content[0], "text")
                if json.loads(text) != structured:
                    raise SystemExit(f"{name}: the text content is not the structured content")
                seen["validated"].append(name)
                return structured

            made = await call("create_box", {"ttl_secs": 300})
            box = made["id"]
            await call("run", {"box": box, "argv": ["sh", "-c", "echo out; echo err >&2; exit 3"]})
            await call("run", {"box": box, "argv": ["sleep", "5"], "timeout_secs": 1})
            await call("run_code", {"box": box, "language": "sh", "code": "echo $((6*7))"})
            await call("write_file", {"box": box, "path": "dir/note.txt", "content": "hi\n"})
            blob = base64.b64encode(bytes([0, 255, 10])).decode()
            await call("write_file", {"box": box, "path": "dir/blob", "content_base64": blob})
            await call("read_file", {"box": box, "path": "dir/note.txt"})
            await call("read_file", {"box": box, "path": "dir/blob"})
            await call("list_files", {"box": box, "path": "dir"})
            await call("inspect_box", {"box": box})
            await call("list_boxes", {})
            await call("remove_box", {"box": box})
    print(json.dumps(seen))


asyncio.run(main())
