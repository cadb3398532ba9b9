//! Fault injection for tests of the fail-closed writer, so they need no full
//! filesystem to mount: debug builds only (`cfg(debug_assertions)`); in a release
//! build [`check`] is an empty inline function and the variable is ignored.
//!
//! `HARNESSD_FAILPOINTS` lists faults as `point=error`, comma-separated:
//! `events.append=enospc` (the line's first half is written, then the write fails,
//! so the cut back is exercised), `events.sync=eio` (the `fdatasync` fails).
//! Errors: `enospc`, `eio`. A value starting with `@` names a file holding the
//! list, read again at every check, so a test can raise and clear faults while
//! the daemon runs (an absent or empty file: no fault).

/// The error the fault `point` is set to raise now, if any.
#[cfg(debug_assertions)]
pub(crate) fn check(point: &str) -> Result<(), std::io::Error> {
    let Ok(spec) = std::env::var("HARNESSD_FAILPOINTS") else {
        return Ok(());
    };
    let spec = match spec.strip_prefix('@') {
        Some(file) => std::fs::read_to_string(file).unwrap_or_default(),
        None => spec,
    };
    for item in spec.split(',') {
        let Some((name, error)) = item.trim().split_once('=') else {
            continue;
        };
        if name.trim() != point {
            continue;
        }
        let errno = match error.trim() {
            "enospc" => libc::ENOSPC,
            "eio" => libc::EIO,
            // A misspelt fault would test nothing: fail loudly, with the name.
            other => {
                return Err(std::io::Error::other(format!(
                    "HARNESSD_FAILPOINTS: unknown error {other:?} for {point} (enospc, eio)"
                )));
            }
        };
        return Err(std::io::Error::from_raw_os_error(errno));
    }
    Ok(())
}

/// Release builds: no fault, nothing read.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub(crate) fn check(_point: &str) -> Result<(), std::io::Error> {
    Ok(())
}

/// A sink that takes the first half of a line, then fails with `error`: a write
/// cut short by a full disk.
pub(crate) struct HalfThenFail<'a, S> {
    /// The real sink.
    pub(crate) inner: &'a mut S,
    /// The error to fail with.
    pub(crate) error: Option<std::io::Error>,
    /// Whether the half was written.
    pub(crate) wrote_half: bool,
}

impl<S: std::io::Write> std::io::Write for HalfThenFail<'_, S> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if !self.wrote_half && buf.len() >= 2 {
            self.wrote_half = true;
            return self.inner.write(&buf[..buf.len() / 2]);
        }
        Err(self
            .error
            .take()
            .unwrap_or_else(|| std::io::Error::from_raw_os_error(libc::EIO)))
    }

    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

impl<S: super::file::LineSink> super::file::LineSink for HalfThenFail<'_, S> {
    fn cut_to(&mut self, len: u64) -> std::io::Result<()> {
        self.inner.cut_to(len)
    }
}
