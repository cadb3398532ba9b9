//! One module per subcommand. Each returns the process exit code; only `main`
//! exits.

pub mod boundary;
pub mod check;
pub mod clients;
pub mod init;
pub mod policy;
pub mod progress;
pub mod replay;
pub mod run;
pub mod sandbox;

/// Exit code of a usage or config error.
pub const EXIT_CONFIG: i32 = 2;

/// Loads the root's config and policy; on error prints it and returns the exit
/// code the command should end with.
pub fn load_root(root: &std::path::Path) -> Result<crate::config::Loaded, i32> {
    crate::config::load(root).map_err(|e| {
        eprintln!("error: {}", crate::text::escape_text(&e.to_string()));
        EXIT_CONFIG
    })
}

/// For `run` and `serve`: the config, policy and a model client with the key.
/// A missing key is a config error before any request.
pub fn load_with_client(
    root: &std::path::Path,
    env: impl Fn(&str) -> Option<String>,
) -> anyhow::Result<
    Result<
        (
            std::sync::Arc<crate::config::Loaded>,
            crate::llm::AnthropicClient,
        ),
        i32,
    >,
> {
    let loaded = match load_root(root) {
        Ok(l) => std::sync::Arc::new(l),
        Err(code) => return Ok(Err(code)),
    };
    let key = match crate::config::ApiKey::load(&loaded, env) {
        Ok(k) => k,
        Err(e) => {
            eprintln!("error: {}", crate::text::escape_text(&e.to_string()));
            return Ok(Err(EXIT_CONFIG));
        }
    };
    let client = crate::llm::AnthropicClient::new(&loaded.config.api, key)?;
    Ok(Ok((loaded, client)))
}
