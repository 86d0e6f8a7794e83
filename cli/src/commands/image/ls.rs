//! `tinybox image ls`: the stored images as a table.

use tinybox_core::Error;
use tinybox_core::images::Images;

use super::super::App;
use crate::output;

pub fn run(app: &App, images: &Images) -> Result<u8, Error> {
    let list = images.list()?;
    if app.json {
        output::json(&list);
        return Ok(0);
    }
    if list.is_empty() {
        eprintln!("tinybox: no images; `tinybox image pull REF` or `tinybox image import FILE` stores one");
        return Ok(0);
    }
    let mut t = output::table(&["IMAGE", "ID", "PLATFORM", "LAYERS", "SIZE", "STORED", "USED BY"]);
    for image in &list {
        let names =
            if image.refs.is_empty() { vec!["(no name)".to_owned()] } else { image.refs.iter().cloned().collect() };
        for name in names {
            t.add_row(vec![
                name,
                image.id.short().to_owned(),
                image.platform.clone(),
                image.layers.len().to_string(),
                super::size(image.size),
                output::timestamp(image.created),
                image.users.iter().cloned().collect::<Vec<_>>().join(", "),
            ]);
        }
    }
    output::print_table(&t);
    Ok(0)
}
