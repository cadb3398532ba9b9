//! Tool inputs: one type per tool, the single source of both the advertised JSON
//! Schema and the validation of what the model sends.

use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::Value;

use super::ToolName;

/// `read_file` input.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ReadFileInput {
    /// File to read; relative to the workspace unless absolute.
    pub path: String,
    /// First line to return, 1-based.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub offset: Option<u64>,
    /// Number of lines to return.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub limit: Option<u64>,
}

/// `write_file` input.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct WriteFileInput {
    /// File to write; relative to the workspace unless absolute.
    pub path: String,
    /// The whole new content.
    pub content: String,
}

/// `edit_file` input.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct EditFileInput {
    /// File to edit; relative to the workspace unless absolute.
    pub path: String,
    /// Exact text to replace; must occur exactly once.
    pub old_string: String,
    /// Replacement text.
    pub new_string: String,
}

/// `list_dir` input.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ListDirInput {
    /// Directory to list; the workspace when omitted.
    #[serde(default)]
    pub path: Option<String>,
}

/// `run_bash` input.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunBashInput {
    /// The command, run with `bash -c` in the workspace.
    pub command: String,
    /// Seconds before the command is killed; clamped to the policy's limit.
    #[serde(default)]
    #[schemars(range(min = 1))]
    pub timeout_secs: Option<u64>,
}

/// `run_python` input.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct RunPythonInput {
    /// Python 3 source, run with `python3 -c`.
    pub code: String,
}

/// `get_time` input: nothing.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct GetTimeInput {}

/// `load_skill` input.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct LoadSkillInput {
    /// The skill's name, as the system prompt lists it.
    pub name: String,
}

/// `delegate` input.
#[derive(Debug, Clone, Deserialize, JsonSchema, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct DelegateInput {
    /// The child task's prompt: everything it needs to know, since it sees none
    /// of this conversation.
    pub prompt: String,
    /// The tools the child may use, by name: a subset of yours. Omitted: all of
    /// yours.
    #[serde(default)]
    pub tools: Option<Vec<String>>,
}

/// A validated input of any tool.
#[derive(Debug, Clone, PartialEq)]
pub enum ToolInput {
    /// `read_file`.
    ReadFile(ReadFileInput),
    /// `write_file`.
    WriteFile(WriteFileInput),
    /// `edit_file`.
    EditFile(EditFileInput),
    /// `list_dir`.
    ListDir(ListDirInput),
    /// `run_bash`.
    RunBash(RunBashInput),
    /// `run_python`.
    RunPython(RunPythonInput),
    /// `get_time`.
    GetTime(GetTimeInput),
    /// `load_skill`.
    LoadSkill(LoadSkillInput),
    /// `delegate`.
    Delegate(DelegateInput),
}

fn parse_as<T: for<'de> Deserialize<'de>>(input: &Value) -> Result<T, String> {
    serde_path_to_error::deserialize(input).map_err(|e| {
        let path = e.path().to_string();
        if path == "." {
            e.inner().to_string()
        } else {
            format!("{path}: {}", e.inner())
        }
    })
}

impl ToolInput {
    /// Validates `input` for `tool`; the error is written for the model.
    pub fn parse(tool: ToolName, input: &Value) -> Result<ToolInput, String> {
        // A model sometimes sends `null` for a tool without parameters.
        let empty = Value::Object(Default::default());
        let input = if input.is_null() { &empty } else { input };
        let parsed = match tool {
            ToolName::ReadFile => parse_as(input).map(ToolInput::ReadFile),
            ToolName::WriteFile => parse_as(input).map(ToolInput::WriteFile),
            ToolName::EditFile => parse_as(input).map(ToolInput::EditFile),
            ToolName::ListDir => parse_as(input).map(ToolInput::ListDir),
            ToolName::RunBash => parse_as(input).map(ToolInput::RunBash),
            ToolName::RunPython => parse_as(input).map(ToolInput::RunPython),
            ToolName::GetTime => parse_as(input).map(ToolInput::GetTime),
            ToolName::LoadSkill => parse_as(input).map(ToolInput::LoadSkill),
            ToolName::Delegate => parse_as(input).map(ToolInput::Delegate),
        }?;
        parsed.check()?;
        Ok(parsed)
    }

    /// What serde cannot say: non-empty strings, positive numbers.
    fn check(&self) -> Result<(), String> {
        let nonempty = |field: &str, v: &str| {
            if v.is_empty() {
                Err(format!("{field} must not be empty"))
            } else {
                Ok(())
            }
        };
        let positive = |field: &str, v: Option<u64>| {
            if v == Some(0) {
                Err(format!("{field} must be at least 1"))
            } else {
                Ok(())
            }
        };
        match self {
            ToolInput::ReadFile(i) => {
                nonempty("path", &i.path)?;
                positive("offset", i.offset)?;
                positive("limit", i.limit)
            }
            ToolInput::WriteFile(i) => nonempty("path", &i.path),
            ToolInput::EditFile(i) => {
                nonempty("path", &i.path)?;
                nonempty("old_string", &i.old_string)
            }
            ToolInput::ListDir(_) | ToolInput::GetTime(_) => Ok(()),
            ToolInput::RunBash(i) => {
                nonempty("command", &i.command)?;
                positive("timeout_secs", i.timeout_secs)
            }
            ToolInput::RunPython(i) => nonempty("code", &i.code),
            ToolInput::LoadSkill(i) => nonempty("name", &i.name),
            ToolInput::Delegate(i) => {
                nonempty("prompt", &i.prompt)?;
                i.tools
                    .iter()
                    .flatten()
                    .try_for_each(|t| nonempty("each of tools", t))
            }
        }
    }
}

/// The JSON Schema advertised for `tool`'s input.
pub fn schema(tool: ToolName) -> Value {
    let schema = match tool {
        ToolName::ReadFile => schemars::schema_for!(ReadFileInput),
        ToolName::WriteFile => schemars::schema_for!(WriteFileInput),
        ToolName::EditFile => schemars::schema_for!(EditFileInput),
        ToolName::ListDir => schemars::schema_for!(ListDirInput),
        ToolName::RunBash => schemars::schema_for!(RunBashInput),
        ToolName::RunPython => schemars::schema_for!(RunPythonInput),
        ToolName::GetTime => schemars::schema_for!(GetTimeInput),
        ToolName::LoadSkill => schemars::schema_for!(LoadSkillInput),
        ToolName::Delegate => schemars::schema_for!(DelegateInput),
    };
    let mut value = schema.to_value();
    if let Some(obj) = value.as_object_mut() {
        // The model needs the shape, not the meta-schema or Rust type names.
        obj.remove("$schema");
        obj.remove("title");
        obj.remove("description");
        obj.entry("properties")
            .or_insert_with(|| Value::Object(Default::default()));
    }
    value
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn valid_inputs_parse() {
        let i = ToolInput::parse(ToolName::ReadFile, &json!({"path": "a", "limit": 3})).unwrap();
        assert_eq!(
            i,
            ToolInput::ReadFile(ReadFileInput {
                path: "a".into(),
                offset: None,
                limit: Some(3)
            })
        );
        assert!(ToolInput::parse(ToolName::GetTime, &json!({})).is_ok());
        assert!(ToolInput::parse(ToolName::GetTime, &Value::Null).is_ok());
        assert!(ToolInput::parse(ToolName::ListDir, &json!({})).is_ok());
    }

    #[test]
    fn invalid_inputs_say_what_is_wrong() {
        let e = ToolInput::parse(ToolName::ReadFile, &json!({})).unwrap_err();
        assert!(e.contains("missing field `path`"), "{e}");
        let e = ToolInput::parse(ToolName::RunBash, &json!({"command": 3})).unwrap_err();
        assert!(e.contains("command") && e.contains("invalid type"), "{e}");
        let e = ToolInput::parse(ToolName::RunBash, &json!({"command": "ls", "x": 1})).unwrap_err();
        assert!(e.contains("unknown field `x`"), "{e}");
        let e =
            ToolInput::parse(ToolName::ReadFile, &json!({"path": "a", "offset": 0})).unwrap_err();
        assert!(e.contains("offset must be at least 1"), "{e}");
        let e = ToolInput::parse(ToolName::RunBash, &json!({"command": ""})).unwrap_err();
        assert!(e.contains("must not be empty"), "{e}");
    }
}
