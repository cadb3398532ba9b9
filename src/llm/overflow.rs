//! Whether the model API refused a request because it exceeds the model's context
//! window. Anthropic, llama.cpp's `llama-server`, vLLM and Ollama each say so in
//! words of their own; on any of them the agent loop compacts the history and
//! sends it once more (docs/long-tasks.md). Only the words are known: the servers agree
//! on no error type, and a 400 says nothing more by itself.

use super::anthropic::LlmError;

/// What a refusal for length says, lowercase, with the server that says it.
const PHRASES: [&str; 5] = [
    // Anthropic: "prompt is too long: 212345 tokens > 200000 maximum".
    "prompt is too long",
    // Anthropic, when max_tokens is counted in: "input length and `max_tokens`
    // exceed context limit: 193125 + 21333 > 200000, …".
    "exceed context limit",
    // llama.cpp's error type, and its message (older versions typed it
    // `invalid_request_error`).
    "exceed_context_size_error",
    "exceeds the available context size",
    // vLLM ("This model's maximum context length is 4096 tokens. However, you
    // requested …") and Ollama ("input length exceeds maximum context length").
    "maximum context length",
];

impl LlmError {
    /// Whether this is a 400 saying the request exceeds the model's context window.
    pub fn exceeds_context(&self) -> bool {
        let LlmError::Status {
            status: 400,
            message,
        } = self
        else {
            return false;
        };
        let message = message.to_lowercase();
        PHRASES.iter().any(|p| message.contains(p))
    }
}

#[cfg(test)]
mod tests {
    use super::super::anthropic::api_error_message;
    use super::*;

    /// The error a body answered with `status` becomes.
    fn error(status: u16, body: &str) -> LlmError {
        LlmError::Status {
            status,
            message: api_error_message(body.as_bytes()),
        }
    }

    #[test]
    fn anthropic_prompt_is_too_long() {
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"prompt is too long: 208310 tokens > 200000 maximum"},"request_id":"req_011CVQe1dLrGNMJyE1ghG1av"}"#;
        assert!(error(400, body).exceeds_context());
    }

    #[test]
    fn anthropic_input_and_max_tokens_exceed_context_limit() {
        let body = r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length and `max_tokens` exceed context limit: 193125 + 21333 > 200000, decrease input length or `max_tokens` and try again"},"request_id":"req_vrtx_011CWscdZLbCzvTdKUeranGy"}"#;
        assert!(error(400, body).exceeds_context());
    }

    #[test]
    fn llama_cpp_exceed_context_size_error() {
        let body = r#"{"error":{"code":400,"message":"request (2400 tokens) exceeds the available context size (1536 tokens), try increasing it","type":"exceed_context_size_error","n_prompt_tokens":2400,"n_ctx":1536}}"#;
        assert!(error(400, body).exceeds_context());
    }

    #[test]
    fn older_llama_cpp_typed_invalid_request_error() {
        let body = r#"{"error":{"code":400,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"invalid_request_error"}}"#;
        assert!(error(400, body).exceeds_context());
    }

    #[test]
    fn vllm_messages_endpoint() {
        let body = r#"{"type":"error","error":{"type":"BadRequestError","message":"This model's maximum context length is 4096 tokens. However, you requested 5000 tokens (4000 in the messages, 1000 in the completion). Please reduce the length of the messages or completion."}}"#;
        assert!(error(400, body).exceeds_context());
    }

    #[test]
    fn vllm_openai_style_body() {
        let body = r#"{"object":"error","message":"This model's maximum context length is 16384 tokens. However, you requested 122946 tokens (112946 in the messages, 10000 in the completion). Please reduce the length of the messages or completion.","type":"BadRequestError","param":null,"code":400}"#;
        let e = error(400, body);
        assert!(e.exceeds_context());
        assert!(
            e.to_string().contains("BadRequestError: This model's"),
            "{e}"
        );
    }

    #[test]
    fn ollama_messages_endpoint_and_native_body() {
        let wrapped = r#"{"type":"error","error":{"type":"invalid_request_error","message":"input length exceeds maximum context length"},"request_id":"req_1a2b3c"}"#;
        assert!(error(400, wrapped).exceeds_context());
        let native = r#"{"error":"input length exceeds maximum context length"}"#;
        let e = error(400, native);
        assert!(e.exceeds_context());
        assert_eq!(
            e.to_string(),
            "model API returned HTTP 400: error: input length exceeds maximum context length"
        );
    }

    #[test]
    fn other_refusals_are_not_overflows() {
        let too_big = r#"{"type":"error","error":{"type":"invalid_request_error","message":"max_tokens: 300000 > 64000, which is the maximum allowed number of output tokens"}}"#;
        assert!(!error(400, too_big).exceeds_context());
        let bytes = r#"{"type":"error","error":{"type":"request_too_large","message":"Request exceeds the maximum allowed number of bytes."}}"#;
        assert!(!error(413, bytes).exceeds_context());
        // The words under another status are a server failure, retried as such.
        let llama = r#"{"error":{"code":500,"message":"the request exceeds the available context size. try increasing the context size or enable context shift","type":"exceed_context_size_error","n_prompt_tokens":1407,"n_ctx":256}}"#;
        assert!(!error(500, llama).exceeds_context());
        assert!(!LlmError::Transport("maximum context length".into()).exceeds_context());
    }
}
