//! `tinybox cp SRC BOX:DST` and `tinybox cp BOX:SRC DST`: copies files and
//! directories into and out of a box (`-` is a tar stream on stdin or
//! stdout, as with `docker cp`). Which side is the box, and every rule of
//! the copy, are core's; this maps the arguments and the streams.

use std::io::IsTerminal;
use std::os::fd::AsFd;

use clap::Args;
use tinybox_core::{CopyError, CopyRequest, CopyRoute, Direction, Error, Local};

use super::App;

#[derive(Debug, Args)]
pub struct CpCmd {
    /// What to copy: a path here, `-` (a tar on stdin), or BOX:PATH.
    pub src: String,
    /// Where to: BOX:PATH, a path here, or `-` (a tar on stdout).
    pub dst: String,
    /// Out of a box: the most the copy may write here, and the largest
    /// size any one file of it may claim (holes included); past either it
    /// stops and removes what it wrote. With `-`: the most it sends.
    /// Default: 10G.
    #[arg(long, value_parser = positive_size, value_name = "SIZE")]
    pub max_size: Option<u64>,
}

fn positive_size(s: &str) -> Result<u64, String> {
    match crate::args::parse_size(s)? {
        0 => Err(format!("{s} is not positive; give a size such as 10G")),
        n => Ok(n),
    }
}

impl CpCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        let route = CopyRoute::parse(&self.src, &self.dst)?;
        let local = match (route.local, route.direction) {
            (Some(path), _) => Local::Path(path),
            (None, Direction::In) => {
                let stdin = std::io::stdin();
                if stdin.is_terminal() {
                    return Err(CopyError::Terminal("stdin").into());
                }
                Local::Tar(stdin.as_fd().try_clone_to_owned().map_err(|e| Error::io("cannot read stdin", e))?)
            }
            (None, Direction::Out) => {
                let stdout = std::io::stdout();
                if stdout.is_terminal() {
                    return Err(CopyError::Terminal("stdout").into());
                }
                Local::Tar(stdout.as_fd().try_clone_to_owned().map_err(|e| Error::io("cannot write stdout", e))?)
            }
        };
        let request = CopyRequest {
            box_id: route.box_id,
            direction: route.direction,
            box_path: route.box_path,
            local,
            max_size: self.max_size,
        };
        let outcome = app.engine.copy(request).await?;
        if app.json {
            crate::output::json(&outcome);
        }
        Ok(0)
    }
}
