//! The way back from an intercepted host: every value the proxy put in
//! is turned back into its placeholder in the response's headers and body,
//! so a host that echoes a request (its headers in a body, say) does not
//! hand the box what it must never read.

use std::pin::Pin;
use std::task::{Context, Poll, ready};

use bytes::Bytes;
use hyper::body::{Body, Frame, Incoming};
use hyper::header::HeaderValue;

/// The values and their placeholders, longest value first.
#[derive(Clone)]
pub(crate) struct Pairs(Vec<(Vec<u8>, Vec<u8>)>);

impl Pairs {
    pub(crate) fn new(mut pairs: Vec<(Vec<u8>, Vec<u8>)>) -> Pairs {
        pairs.retain(|(v, _)| !v.is_empty());
        pairs.sort_by_key(|(v, _)| std::cmp::Reverse(v.len()));
        Pairs(pairs)
    }

    /// These pairs and `more` (a `Basic` credential as sent, and as the box wrote it).
    pub(crate) fn with(mut self, more: impl Iterator<Item = (String, String)>) -> Pairs {
        self.0.extend(more.map(|(sent, wrote)| (sent.into_bytes(), wrote.into_bytes())));
        Pairs::new(self.0)
    }

    /// `bytes` with every whole value replaced, and the raw tail that
    /// could still be the start of one (kept back unless `last`).
    fn scrub(&self, bytes: &[u8], last: bool) -> (Vec<u8>, Vec<u8>) {
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        'scan: while i < bytes.len() {
            for (value, placeholder) in &self.0 {
                if bytes[i..].starts_with(value) {
                    out.extend_from_slice(placeholder);
                    i += value.len();
                    continue 'scan;
                }
                if !last && value.starts_with(&bytes[i..]) {
                    return (out, bytes[i..].to_vec());
                }
            }
            out.push(bytes[i]);
            i += 1;
        }
        (out, Vec::new())
    }

    /// A header value with every value replaced.
    pub(crate) fn header(&self, value: &HeaderValue) -> HeaderValue {
        let (out, _) = self.scrub(value.as_bytes(), true);
        HeaderValue::from_bytes(&out).unwrap_or_else(|_| HeaderValue::from_static(""))
    }

    pub(crate) fn holds_any(&self, bytes: &[u8]) -> bool {
        self.0.iter().any(|(v, _)| bytes.windows(v.len()).any(|w| w == v.as_slice()))
    }
}

/// A response body, scrubbed as it streams.
pub(crate) struct Scrubbed {
    inner: Incoming,
    pairs: Pairs,
    carry: Vec<u8>,
    ended: bool,
}

impl Scrubbed {
    pub(crate) fn new(inner: Incoming, pairs: Pairs) -> Scrubbed {
        Scrubbed { inner, pairs, carry: Vec::new(), ended: false }
    }
}

impl Body for Scrubbed {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        loop {
            if self.ended {
                return Poll::Ready(None);
            }
            match ready!(Pin::new(&mut self.inner).poll_frame(cx)) {
                None => {
                    self.ended = true;
                    let rest = std::mem::take(&mut self.carry);
                    if rest.is_empty() {
                        return Poll::Ready(None);
                    }
                    let (out, _) = self.pairs.scrub(&rest, true);
                    return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                }
                Some(Err(e)) => return Poll::Ready(Some(Err(e))),
                Some(Ok(frame)) => match frame.into_data() {
                    Ok(data) => {
                        let mut bytes = std::mem::take(&mut self.carry);
                        bytes.extend_from_slice(&data);
                        let (out, carry) = self.pairs.scrub(&bytes, false);
                        self.carry = carry;
                        if !out.is_empty() {
                            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(out)))));
                        }
                    }
                    // Trailers: their values scrubbed like the headers'.
                    Err(frame) => {
                        let frame = match frame.into_trailers() {
                            Ok(mut trailers) => {
                                for value in trailers.values_mut() {
                                    *value = self.pairs.header(value);
                                }
                                Frame::trailers(trailers)
                            }
                            Err(other) => other,
                        };
                        return Poll::Ready(Some(Ok(frame)));
                    }
                },
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.ended
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_become_placeholders_even_split_across_chunks() {
        let pairs = Pairs::new(vec![(b"s3cret".to_vec(), b"PH".to_vec())]);
        let (out, carry) = pairs.scrub(b"a s3cret b s3c", false);
        assert_eq!((out.as_slice(), carry.as_slice()), (&b"a PH b "[..], &b"s3c"[..]));
        let mut next = carry;
        next.extend_from_slice(b"ret!");
        assert_eq!(pairs.scrub(&next, false).0, b"PH!");
        assert_eq!(pairs.scrub(b"s3c", true).0, b"s3c", "at the end a partial value is just bytes");
        assert_eq!(pairs.header(&HeaderValue::from_static("Bearer s3cret")), "Bearer PH");
    }
}
