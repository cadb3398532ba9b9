//! The API key: from the environment variable named by `api.api_key_env`, or from
//! `api.api_key_file`. The value never appears in a file, event, transcript or log
//! line: [`ApiKey`]'s `Debug` is redacted and tools get a scrubbed environment.

use std::os::unix::fs::MetadataExt;

use super::{ConfigError, Loaded, resolve};

/// The API key. Its `Debug` never shows the value.
#[derive(Clone)]
pub struct ApiKey(String);

impl std::fmt::Debug for ApiKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("ApiKey(<redacted>)")
    }
}

impl ApiKey {
    /// Wraps a key value.
    pub fn new(value: String) -> ApiKey {
        ApiKey(value)
    }

    /// The key's value, for the request header.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Finds the key for `loaded`: `api.api_key_file` if set, else the environment
    /// variable, looked up through `env` (main passes `std::env::var`).
    pub fn load(
        loaded: &Loaded,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<ApiKey, ConfigError> {
        let api = &loaded.config.api;
        if let Some(rel) = &api.api_key_file {
            return read_credential(loaded, rel, "api.api_key_file", None).map(ApiKey);
        }
        match env(&api.api_key_env) {
            Some(key) if !key.trim().is_empty() => Ok(ApiKey(key.trim().to_string())),
            _ => Err(ConfigError::invalid(
                super::CONFIG_FILE,
                None,
                "api.api_key_env",
                format!(
                    "the environment variable {} is not set or empty; export the API key in it \
                     (or set api.api_key_file)",
                    api.api_key_env
                ),
            )),
        }
    }
}

/// The content, trimmed, of the credential file `rel` (relative to the root
/// unless absolute) that config key `key` names: it must be readable by its owner
/// only (mode 0600 or stricter) and outside every allowed path, where tools could
/// read it, and not empty. Every `*_file` key of a secret follows these rules; an
/// error names `key`, at `at` when known.
pub fn read_credential(
    loaded: &Loaded,
    rel: &str,
    key: &str,
    at: Option<super::Location>,
) -> Result<String, ConfigError> {
    let path = resolve(&loaded.paths.root, rel);
    let bad = |m: String| ConfigError::invalid(super::CONFIG_FILE, at, key, m);
    let meta = std::fs::metadata(&path)
        .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
    if meta.mode() & 0o077 != 0 {
        return Err(bad(format!(
            "{} has mode {:o}; run `chmod 600 {}` so only its owner can read it",
            path.display(),
            meta.mode() & 0o777,
            path.display()
        )));
    }
    let canonical = path.canonicalize().unwrap_or(path.clone());
    let allowed = &loaded.policy.settings.allowed_paths;
    for p in allowed.read.iter().chain(&allowed.write) {
        let p = resolve(&loaded.paths.root, p);
        let p = p.canonicalize().unwrap_or(p);
        if canonical.starts_with(&p) {
            return Err(bad(format!(
                "{} is inside the allowed path {}, where tools could read it; move it \
                 out of every allowed path",
                path.display(),
                p.display()
            )));
        }
    }
    let value = std::fs::read_to_string(&path)
        .map_err(|e| bad(format!("cannot read {}: {e}", path.display())))?;
    let value = value.trim().to_string();
    if value.is_empty() {
        return Err(bad(format!("{} is empty", path.display())));
    }
    Ok(value)
}
