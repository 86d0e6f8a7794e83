//! `tinybox image inspect REF`: one image's record, config and root filesystem.

use clap::Args;
use tinybox_core::Error;
use tinybox_core::images::Images;

use super::super::App;
use crate::output;

#[derive(Debug, Args)]
pub struct InspectCmd {
    /// A reference, an image id, or a unique prefix of one.
    pub image: String,
}

impl InspectCmd {
    pub fn run(self, app: &App, images: &Images) -> Result<u8, Error> {
        let d = images.inspect(&self.image)?;
        if app.json {
            output::json(&d);
            return Ok(0);
        }
        let r = &d.record;
        let c = &d.config;
        let words = |v: &Option<Vec<String>>| v.as_ref().map(|v| v.join(" ")).unwrap_or_else(|| "-".into());
        println!("id:          {}", r.id);
        println!("names:       {}", r.refs.iter().cloned().collect::<Vec<_>>().join(", "));
        if let Some(m) = &r.manifest_digest {
            println!("manifest:    {m}");
        }
        println!("platform:    {}", r.platform);
        println!("source:      {}", r.source);
        println!("size:        {}", super::size(r.size));
        println!("rootfs:      {}", d.rootfs.display());
        println!("entrypoint:  {}", words(&c.entrypoint));
        println!("cmd:         {}", words(&c.cmd));
        println!("workdir:     {}", c.working_dir.as_deref().unwrap_or("-"));
        println!("user:        {}", c.user.as_deref().unwrap_or("-"));
        println!("env:         {}", c.env.join(" "));
        println!("used by:     {}", r.users.iter().cloned().collect::<Vec<_>>().join(", "));
        println!("layers:");
        for l in &r.layers {
            println!("  {}  {}  {}", l.digest, super::size(l.size), l.media_type);
        }
        Ok(0)
    }
}
