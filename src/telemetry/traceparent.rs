//! The W3C `traceparent` a caller hands in to join its trace:
//! `<version>-<trace id>-<parent id>-<flags>`, lowercase hex.

/// A `traceparent` that passed [`TraceParent::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TraceParent {
    /// 32 hex digits, not all zero.
    pub trace_id: String,
    /// The caller's span: 16 hex digits, not all zero.
    pub parent_id: String,
    /// The caller's `sampled` flag: a trace it does not sample is not exported.
    pub sampled: bool,
}

/// Why a `traceparent` was refused.
#[derive(Debug, thiserror::Error)]
#[error(
    "traceparent {given:?} is not a W3C traceparent ({why}); it reads \
     00-<32 hex trace id>-<16 hex parent id>-<2 hex flags>, lowercase, e.g. \
     00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
)]
pub struct TraceParentError {
    /// The value as given (cut when long).
    pub given: String,
    /// What is wrong with it.
    pub why: &'static str,
}

impl TraceParent {
    /// Parses a header value. A version other than `00` is read as far as `00`
    /// defines it (the W3C rule for later versions); `ff` is refused.
    pub fn parse(text: &str) -> Result<TraceParent, TraceParentError> {
        let fail = |why| TraceParentError {
            given: text.chars().take(80).collect(),
            why,
        };
        let hex = |s: &str| {
            s.bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
        };
        if text.len() < 55 || !text.is_ascii() {
            return Err(fail("too short, or not ASCII"));
        }
        let (version, rest) = text.split_at(2);
        if !hex(version) || version == "ff" {
            return Err(fail(
                "its version is not two lowercase hex digits other than ff",
            ));
        }
        if version == "00" && text.len() != 55 {
            return Err(fail("version 00 is exactly 55 characters"));
        }
        if text.len() > 55 && text.as_bytes()[55] != b'-' {
            return Err(fail("a later version's extra fields start with '-'"));
        }
        let b = rest.as_bytes();
        if b[0] != b'-' || b[33] != b'-' || b[50] != b'-' {
            return Err(fail("its four fields are not separated by '-'"));
        }
        let (trace_id, parent_id, flags) = (&rest[1..33], &rest[34..50], &rest[51..53]);
        if !(hex(trace_id) && hex(parent_id) && hex(flags)) {
            return Err(fail("a field is not lowercase hex"));
        }
        if trace_id.bytes().all(|c| c == b'0') || parent_id.bytes().all(|c| c == b'0') {
            return Err(fail("an all-zero trace id or parent id is invalid"));
        }
        let flags = u8::from_str_radix(flags, 16).map_err(|_| fail("bad flags"))?;
        Ok(TraceParent {
            trace_id: trace_id.to_string(),
            parent_id: parent_id.to_string(),
            sampled: flags & 1 == 1,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::TraceParent;

    #[test]
    fn parses_the_w3c_example_and_refuses_broken_ones() {
        let tp =
            TraceParent::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01").unwrap();
        assert_eq!(tp.trace_id, "4bf92f3577b34da6a3ce929d0e0e4736");
        assert_eq!(tp.parent_id, "00f067aa0ba902b7");
        assert!(tp.sampled);
        for bad in [
            "",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-x",
            "00_4bf92f3577b34da6a3ce929d0e0e4736_00f067aa0ba902b7_01",
        ] {
            assert!(TraceParent::parse(bad).is_err(), "{bad:?}");
        }
        // A later version may carry more, after a '-'.
        assert!(
            TraceParent::parse("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-zz")
                .is_ok()
        );
    }
}
