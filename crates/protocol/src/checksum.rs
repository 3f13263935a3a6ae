//! MD5 checksums exactly as SQS computes them, which SDKs verify on send and receive.

use leasehold_engine::{AttributeData, MessageAttributes};
use md5::{Digest, Md5};

pub fn md5_hex(bytes: &[u8]) -> String {
    hex(&Md5::digest(bytes))
}

/// Lower-case hex, written straight into one string (this runs for every message).
fn hex(bytes: &[u8]) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        out.push(DIGITS[usize::from(b >> 4)] as char);
        out.push(DIGITS[usize::from(b & 0xf)] as char);
    }
    out
}

fn put_len_prefixed(buf: &mut Vec<u8>, bytes: &[u8]) {
    buf.extend_from_slice(&(bytes.len() as u32).to_be_bytes());
    buf.extend_from_slice(bytes);
}

/// MD5OfMessageAttributes: over attributes in name order, each encoded as length-prefixed
/// name, length-prefixed data type, a transport byte (1 text, 2 binary) and the
/// length-prefixed value.
pub fn md5_of_attributes<'a>(
    attributes: impl IntoIterator<Item = (&'a String, &'a leasehold_engine::MessageAttribute)>,
) -> String {
    let mut buf = Vec::new();
    for (name, attr) in attributes {
        put_len_prefixed(&mut buf, name.as_bytes());
        put_len_prefixed(&mut buf, attr.data_type.as_bytes());
        match &attr.data {
            AttributeData::Text(text) => {
                buf.push(1);
                put_len_prefixed(&mut buf, text.as_bytes());
            }
            AttributeData::Binary(bytes) => {
                buf.push(2);
                put_len_prefixed(&mut buf, bytes);
            }
        }
    }
    md5_hex(&buf)
}

/// The attribute checksum of a whole map, or None when it is empty (AWS then omits it).
pub fn md5_of_map(attributes: &MessageAttributes) -> Option<String> {
    (!attributes.is_empty()).then(|| md5_of_attributes(attributes.iter()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use leasehold_engine::MessageAttribute;

    #[test]
    fn body_md5_is_the_hex_digest_of_the_utf8_body() {
        assert_eq!(md5_hex(b"hello"), "5d41402abc4b2a76b9719d911017c592");
    }

    #[test]
    fn attribute_md5_follows_the_documented_encoding() {
        // The documented encoding, spelled out byte by byte for one String attribute.
        let mut attributes = MessageAttributes::new();
        attributes.insert(
            "attr1".into(),
            MessageAttribute {
                data_type: "String".into(),
                data: AttributeData::Text("value1".into()),
            },
        );
        let mut expected = Vec::new();
        expected.extend_from_slice(&[0, 0, 0, 5]);
        expected.extend_from_slice(b"attr1");
        expected.extend_from_slice(&[0, 0, 0, 6]);
        expected.extend_from_slice(b"String");
        expected.push(1);
        expected.extend_from_slice(&[0, 0, 0, 6]);
        expected.extend_from_slice(b"value1");
        assert_eq!(md5_of_map(&attributes), Some(md5_hex(&expected)));
        assert_eq!(md5_of_map(&MessageAttributes::new()), None);
    }
}
