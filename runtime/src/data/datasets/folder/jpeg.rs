//! Whether a JPEG stream reaches its end-of-image marker. Pillow (through libjpeg)
//! refuses a JPEG cut short anywhere — "image file is truncated" — while the `image`
//! crate's decoder fills the missing rows in grey and reports nothing, so the stream's
//! structure is walked here first: marker segments by their lengths, entropy-coded scan
//! data up to the next marker, until EOI.

/// `Ok` when `data`, a JPEG stream (starting with SOI), reaches its EOI marker; else
/// where it stops.
pub(super) fn check_complete(data: &[u8]) -> Result<(), String> {
    const SOI: u8 = 0xd8;
    const EOI: u8 = 0xd9;
    const SOS: u8 = 0xda;
    const TEM: u8 = 0x01;
    let ended = |what: &str| Err(format!("the stream ends {what} ({} bytes)", data.len()));
    if data.len() < 2 || data[0] != 0xff || data[1] != SOI {
        return ended("before its start-of-image marker");
    }
    let mut pos = 2;
    loop {
        // The next marker: bytes before it are tolerated (libjpeg warns "extraneous bytes
        // before marker"), 0xff fill bytes are skipped.
        while pos < data.len() && data[pos] != 0xff {
            pos += 1;
        }
        while pos < data.len() && data[pos] == 0xff {
            pos += 1;
        }
        let Some(&marker) = data.get(pos) else {
            return ended("before its end-of-image marker");
        };
        pos += 1;
        match marker {
            EOI => return Ok(()),
            // Markers without a segment.
            SOI | TEM | 0xd0..=0xd7 => {}
            _ => {
                let Some(len) = data.get(pos..pos + 2) else {
                    return ended(&format!("inside the length of a 0xff{marker:02x} segment"));
                };
                let len = usize::from(u16::from_be_bytes([len[0], len[1]]));
                if pos + len > data.len() {
                    return ended(&format!("inside a 0xff{marker:02x} segment"));
                }
                pos += len.max(2);
                if marker == SOS {
                    match scan_end(data, pos) {
                        Some(end) => pos = end,
                        None => return ended("inside scan data"),
                    }
                }
            }
        }
    }
}

/// Where the entropy-coded data starting at `pos` ends: the first 0xff that is neither a
/// stuffed zero (0xff00) nor a restart marker (0xffd0-0xffd7), or `None` if none.
fn scan_end(data: &[u8], mut pos: usize) -> Option<usize> {
    loop {
        pos += data.get(pos..)?.iter().position(|&b| b == 0xff)?;
        match data.get(pos + 1)? {
            0x00 | 0xd0..=0xd7 | 0xff => pos += 1,
            _ => return Some(pos),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::check_complete;

    /// SOI, an APP0 segment, SOS with two bytes of scan data (one stuffed 0xff, one
    /// restart marker), EOI.
    const WHOLE: [u8; 24] = [
        0xff, 0xd8, 0xff, 0xe0, 0x00, 0x04, 0xaa, 0xbb, 0xff, 0xda, 0x00, 0x03, 0x01, 0x12, 0xff,
        0x00, 0xff, 0xd0, 0x34, 0x56, 0xff, 0xff, 0xff, 0xd9,
    ];

    #[test]
    fn a_whole_stream_is_complete_and_every_cut_is_not() {
        assert_eq!(check_complete(&WHOLE), Ok(()));
        for cut in 0..WHOLE.len() {
            assert!(check_complete(&WHOLE[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = WHOLE.to_vec();
        trailing.extend_from_slice(b"appended");
        assert_eq!(check_complete(&trailing), Ok(()));
    }
}
