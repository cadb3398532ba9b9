"""The compare bench's reference: the barest agent loop there is.

The Anthropic SDK sends system + tools + the whole history, each `run_bash` call
runs as `bash -c` with no sandbox, every result goes back in one user message, and
nothing is recorded. argv: the Messages API's base URL, the prompt.
"""

import subprocess
import sys

import anthropic

TOOLS = [{
    "name": "run_bash",
    "description": "Runs a bash command in the workspace and returns its output.",
    "input_schema": {
        "type": "object",
        "properties": {"command": {"type": "string"}},
        "required": ["command"],
    },
}]

client = anthropic.Anthropic(base_url=sys.argv[1], api_key="bench-key", max_retries=0)
messages = [{"role": "user", "content": sys.argv[2]}]
while True:
    reply = client.messages.create(
        model="claude-sonnet-4-5",
        max_tokens=4096,
        system="You are a helpful agent.",
        tools=TOOLS,
        messages=messages,
    )
    messages.append({
        "role": "assistant",
        "content": [block.model_dump(exclude_none=True) for block in reply.content],
    })
    calls = [block for block in reply.content if block.type == "tool_use"]
    if reply.stop_reason != "tool_use" or not calls:
        break
    results = []
    for call in calls:
        done = subprocess.run(["bash", "-c", call.input["command"]], capture_output=True, text=True)
        results.append({
            "type": "tool_result",
            "tool_use_id": call.id,
            "content": done.stdout + done.stderr,
            "is_error": done.returncode != 0,
        })
    messages.append({"role": "user", "content": results})
