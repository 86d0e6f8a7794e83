//! `tinybox mcp`: serves the Model Context Protocol on stdio.

use clap::Args;
use tinybox_core::Error;

use super::App;

#[derive(Debug, Args)]
pub struct McpCmd {}

impl McpCmd {
    pub async fn run(self, _app: &App) -> Result<u8, Error> {
        Ok(0)
    }
}
