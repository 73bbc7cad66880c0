//! What the host shows of the double's processes: the check that nothing
//! outlives what it should (a stopped sandbox, a timed-out exec's process
//! group) looks here.

/// Pids of host processes whose command line contains `marker`.
pub fn pids_with(marker: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().parse::<u32>().is_ok())
        .filter(|e| {
            std::fs::read(e.path().join("cmdline"))
                .map(|c| String::from_utf8_lossy(&c).contains(marker))
                .unwrap_or(false)
        })
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect()
}

#[cfg(test)]
mod tests {
    #[test]
    fn this_test_process_is_found_by_its_own_command_line() {
        let me = std::process::id().to_string();
        let exe = std::env::args().next().expect("argv[0]");
        assert!(super::pids_with(&exe).contains(&me));
        assert!(super::pids_with("no process carries this: 5f1c0d7e").is_empty());
    }
}
