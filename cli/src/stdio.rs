//! The descriptors a command gets: this process's own stdout and stderr,
//! and its stdin when that is a pipe or a file. A terminal's input is
//! forwarded only with `-i`, through a pipe, so the box never holds the
//! terminal as its stdin.

use std::io::IsTerminal;
use std::os::fd::{AsFd, OwnedFd};

use tinybox_sdk::stdio::StdioFds;

pub fn command_stdio(interactive: bool) -> std::io::Result<StdioFds> {
    let stdin = std::io::stdin();
    let stdin_fd: OwnedFd = if !stdin.is_terminal() {
        stdin.as_fd().try_clone_to_owned()?
    } else if interactive {
        let (reader, mut writer) = std::io::pipe()?;
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut std::io::stdin().lock(), &mut writer);
        });
        reader.into()
    } else {
        std::fs::File::open("/dev/null")?.into()
    };
    Ok(StdioFds {
        stdin: stdin_fd,
        stdout: std::io::stdout().as_fd().try_clone_to_owned()?,
        stderr: std::io::stderr().as_fd().try_clone_to_owned()?,
    })
}
