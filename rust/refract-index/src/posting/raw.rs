//! One stored posting part read in place: its framing checked by
//! [`BitmapFrame`] (sections present, nothing trailing, keys ascending),
//! its contents checked while [`TreemapAssembler`] reads them, as strictly
//! as roaring's own decoder does.
//!
//! [`TreemapAssembler`]: super::TreemapAssembler

use refract_core::roaring_format::{BitmapFrame, ByteCursor, ContainerFrame};
use refract_core::{Error, Result};

/// A framed part and its smallest and largest offset (`None` when empty).
#[derive(Debug)]
pub(super) struct RawPart<'a> {
    frame: BitmapFrame<'a>,
    pub(super) bounds: Option<(u32, u32)>,
}

impl<'a> RawPart<'a> {
    /// Frames `bytes`; `what` names the posting in errors.
    pub(super) fn parse(bytes: &'a [u8], what: &str) -> Result<Self> {
        let frame = BitmapFrame::read_exact(bytes).map_err(|e| corrupt(what, &e.to_string()))?;
        Self::framed(frame, what)
    }

    /// Frames the part at `cursor`, leaving it just after the part.
    pub(super) fn read(cursor: &mut ByteCursor<'a>, what: &str) -> Result<Self> {
        let frame = BitmapFrame::read(cursor).map_err(|e| corrupt(what, &e.to_string()))?;
        Self::framed(frame, what)
    }

    fn framed(frame: BitmapFrame<'a>, what: &str) -> Result<Self> {
        let mut containers = frame.containers();
        let bounds = match (containers.next(), frame.containers().last()) {
            (Some(first), Some(last)) => Some((
                first
                    .min()
                    .ok_or_else(|| corrupt(what, "empty container"))?,
                last.max().ok_or_else(|| corrupt(what, "empty container"))?,
            )),
            _ => None,
        };
        Ok(Self { frame, bounds })
    }

    /// The containers in key order.
    pub(super) fn containers(&self) -> impl Iterator<Item = ContainerFrame<'a>> + '_ {
        self.frame.containers()
    }
}

fn corrupt(what: &str, detail: &str) -> Error {
    Error::corrupt(what, format!("posting part: {detail}"))
}
