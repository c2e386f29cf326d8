//! Tests of `tensorboard`.

use super::*;

#[test]
fn masked_crc_matches_tensorflow() {
    // TFRecord of an empty payload, as TensorFlow writes it (length 0).
    let framed = frame(b"");
    assert_eq!(&framed[..8], &[0u8; 8]);
    // crc32c("") = 0; masked: rotate_right(0, 15) + 0xa282ead8.
    assert_eq!(masked_crc(b""), 0xa282_ead8);
    // crc32c("123456789") = 0xe3069283 (the CRC-32C check value).
    assert_eq!(crc32c::crc32c(b"123456789"), 0xe306_9283);
    assert_eq!(
        masked_crc(b"123456789"),
        0xe306_9283u32.rotate_right(15).wrapping_add(0xa282_ead8)
    );
}

#[test]
fn histogram_trims_to_the_occupied_buckets() {
    let h = histogram(&[0.5, 0.5, 2.0, -1.0]).unwrap();
    assert_eq!(h.num, 4.0);
    assert_eq!((h.min, h.max), (-1.0, 2.0));
    assert_eq!(h.sum, 2.0);
    assert_eq!(h.sum_squares, 5.5);
    assert_eq!(h.bucket.iter().sum::<f64>(), 4.0);
    assert_eq!(h.bucket[0], 0.0);
    assert_eq!(h.bucket.len(), h.bucket_limit.len());
    // -1.0 falls in the first occupied bucket, whose left edge is the limit before it.
    assert!(h.bucket_limit[0] <= -1.0 && h.bucket_limit[1] > -1.0);
    assert!(*h.bucket_limit.last().unwrap() > 2.0);
    assert!(histogram(&[]).is_err());
    assert!(histogram(&[f64::NAN]).is_err());
}

#[test]
fn broken_records_are_found_where_they_start() {
    let mut bytes = frame(b"first");
    let keep = bytes.len();
    bytes.extend(frame(b"second"));
    let (r, broken) = records(&bytes);
    assert_eq!((r.len(), broken), (2, None));
    // Cut inside the second record, then flip a byte in its data.
    let (r, broken) = records(&bytes[..bytes.len() - 3]);
    assert_eq!((r.len(), broken.map(|b| b.0)), (1, Some(keep)));
    let mut flipped = bytes.clone();
    flipped[keep + 13] ^= 1;
    let (r, broken) = records(&flipped);
    assert_eq!((r.len(), broken.map(|b| b.0)), (1, Some(keep)));
    // A length of 2^63 is refused, not allocated.
    let mut huge = (1u64 << 63).to_le_bytes().to_vec();
    huge.extend_from_slice(&masked_crc(&huge.clone()).to_le_bytes());
    assert!(records(&huge).1.is_some());
}
