#!/usr/bin/python3
"""A harnessd pre_tool hook that asks an OPA server for the decision.

harnessd writes one JSON object on stdin (point, task_id, tool, tool_use_id,
input, decision) and reads one on stdout. The call is sent to OPA as its
`input`; the policy answers `{"decision": ..., "reason": ...}` under
`data.harnessd.pre_tool`. Anything else — OPA down, a timeout, an undefined
result — exits non-zero, which harnessd takes as a denial (hooks fail closed).
"""
import json
import os
import sys
import urllib.request

# The hook's own `env` may point it elsewhere; its `network` must list the port.
OPA = os.environ.get("OPA_URL", "http://127.0.0.1:8181/v1/data/harnessd/pre_tool")

call = json.load(sys.stdin)
request = urllib.request.Request(
    OPA,
    data=json.dumps({"input": call}).encode(),
    headers={"Content-Type": "application/json"},
)
with urllib.request.urlopen(request, timeout=3) as response:
    result = json.load(response).get("result")
if not isinstance(result, dict) or result.get("decision") not in ("deny", "ask", "allow", "continue"):
    sys.exit("OPA gave no decision for this call")
json.dump({"decision": result["decision"], "reason": result.get("reason", "")}, sys.stdout)
