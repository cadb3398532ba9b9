package harnessd

import rego.v1

# The first matching branch decides: deny before ask before harnessd's own verdict.
pre_tool := {"decision": "deny", "reason": "production hosts are off limits"} if {
	input.tool == "run_bash"
	contains(input.input.command, "prod-")
} else := {"decision": "ask", "reason": "pushes are reviewed by a human"} if {
	input.tool == "run_bash"
	regex.match(`\bgit\s+push\b`, input.input.command)
} else := {"decision": "continue", "reason": ""}
