//! `inspect` of a box still `creating`: its sandbox is asked what the
//! create has made so far, found by the box's name as `rm` finds it, so a
//! create killed after its container started reads as what is there, not
//! as gone. Who is making it (or that its creator has ended) comes from
//! the record.

use tinybox_sdk::protocol::{BoxRef, BoxState};

use super::{BoxView, Tinybox};
use crate::model::BoxInfo;

impl Tinybox {
    pub(super) async fn inspect_creating(&self, info: BoxInfo) -> BoxView {
        let id = info.id.clone();
        let by = match (&info.creator, info.interrupted_create()) {
            (Some(c), true) => {
                format!(
                    "its create was interrupted (its creator, pid {}, has ended); `tinybox rm {id}` or the daemon's reaper removes what it made",
                    c.pid
                )
            }
            (Some(c), false) => format!("being created by pid {}", c.pid),
            (None, _) => format!("creation did not finish (or is under way); `tinybox rm {id}` removes what it made"),
        };
        let placement = &info.spec.workspace;
        let seen = match self.drivers.sandbox(&placement.sandbox, &placement.host).await {
            Ok(link) => link.inspect(BoxRef::interrupted(id.clone(), &info.spec.namespace)).await,
            Err(e) => Err(e),
        };
        let (state, detail) = match seen {
            Ok(r) => (r.state, format!("{by}; its sandbox says: {}", r.detail.unwrap_or_else(|| r.state.to_string()))),
            // A driver that cannot look a box up by its name alone: the record's word is all.
            Err(e) => (BoxState::Gone, format!("{by}; its sandbox could not say what was made ({e})")),
        };
        BoxView { info, state, state_detail: Some(detail) }
    }
}

#[cfg(test)]
#[path = "creating_tests.rs"]
mod tests;
