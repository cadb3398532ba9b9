//! The shipped systemd unit passes `systemd-analyze verify` (when the tool exists).

#[test]
fn unit_file_verifies() {
    let unit = include_str!("../../systemd/harnessd.service");
    assert!(unit.contains("Type=notify") && unit.contains("ExecReload=/bin/kill -HUP $MAINPID"));
    assert!(unit.contains("LoadCredential=") && unit.contains("NoNewPrivileges=yes"));
    let Ok(out) = std::process::Command::new("systemd-analyze")
        .arg("--version")
        .output()
    else {
        eprintln!("systemd-analyze not installed: verified the unit's key lines only");
        return;
    };
    assert!(out.status.success());
    // Point ExecStart at the binary under test so verify can check it exists.
    let dir = std::env::temp_dir().join(format!("harnessd-unit-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("harnessd.service");
    std::fs::write(
        &path,
        unit.replace("/usr/local/bin/harnessd", crate::common::bin()),
    )
    .unwrap();
    let out = std::process::Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let problems: Vec<&str> = err
        .lines()
        .filter(|l| l.contains("harnessd.service"))
        .filter(|l| !l.contains("Failed to create") && !l.contains("Cannot add dependency job"))
        .collect();
    assert!(problems.is_empty(), "systemd-analyze verify: {err}");
    let _ = std::fs::remove_dir_all(&dir);
}
