//! `tinybox template save|ls|rm`: named snapshots to create boxes from.

use clap::Subcommand;
use tinybox_core::Error;
use tinybox_core::model::{BoxId, TemplateName};

use super::App;
use crate::output;
use crate::output::outln;

#[derive(Debug, Subcommand)]
pub enum TemplateCmd {
    /// Snapshot a box and name the snapshot.
    Save { name: TemplateName, id: BoxId },
    /// List templates.
    Ls,
    /// Forget a template (the snapshot itself stays with its sandbox).
    Rm { name: TemplateName },
}

impl TemplateCmd {
    pub async fn run(self, app: &App) -> Result<u8, Error> {
        match self {
            TemplateCmd::Save { name, id } => {
                let t = app.engine.template_save(name, &id).await?;
                if app.json { output::json(&t) } else { outln!("{} {}", t.name, t.snapshot) }
            }
            TemplateCmd::Ls => {
                let all = app.engine.template_list()?;
                if app.json {
                    output::json(&all);
                } else if all.is_empty() {
                    eprintln!("tinybox: no templates; `tinybox template save NAME BOX` makes one");
                } else {
                    let mut t = output::table(&["NAME", "SNAPSHOT", "PLACEMENT", "CREATED"]);
                    for tpl in &all {
                        let created = tpl.created_at.map(output::timestamp).unwrap_or_else(|| "unknown".into());
                        t.add_row(vec![
                            tpl.name.to_string(),
                            tpl.snapshot.to_string(),
                            format!("{}/{}", tpl.host, tpl.sandbox),
                            created,
                        ]);
                    }
                    output::print_table(&t);
                }
            }
            TemplateCmd::Rm { name } => {
                let t = app.engine.template_remove(&name)?;
                if app.json { output::json(&t) } else { outln!("{}", t.name) }
            }
        }
        Ok(0)
    }
}
