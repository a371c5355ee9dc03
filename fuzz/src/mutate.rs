//! A seeded byte-level mutator for running the harnesses on the stable toolchain
//! (`tests/mutations.rs`): stacked bit flips, interesting values written over length and count
//! fields, truncation, deletion, duplication, insertion and splicing with another seed. The
//! same seed gives the same sequence of inputs.

pub use txn_log::rng::Rng;

/// Values that length, count and version fields are most often wrong with, big-endian i32.
const INTERESTING_32: [u32; 8] = [
    0,
    1,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    0x0100_0000,
    0xffff_fff0,
    0x0000_ffff,
];
/// The same for i16 fields (API versions, string and array lengths of the old encodings).
const INTERESTING_16: [u16; 6] = [0, 1, 0x7fff, 0x8000, 0xffff, 0x00ff];
/// The same for single bytes (flags, magic, attributes, unsigned-varint compact lengths).
const INTERESTING_8: [u8; 6] = [0, 1, 0x7f, 0x80, 0xff, 0x10];

/// Returns `input` with 1-4 stacked mutations; `other` is spliced in by one of them.
pub fn mutate(rng: &mut Rng, input: &[u8], other: &[u8]) -> Vec<u8> {
    let mut out = input.to_vec();
    for _ in 0..1 + rng.index(4) {
        mutate_once(rng, &mut out, other);
    }
    out
}

fn mutate_once(rng: &mut Rng, buf: &mut Vec<u8>, other: &[u8]) {
    let len = buf.len();
    match rng.index(10) {
        0 | 1 if len > 0 => {
            let at = rng.index(len);
            buf[at] ^= 1 << rng.index(8);
        }
        2 if len > 0 => {
            let at = rng.index(len);
            buf[at] = INTERESTING_8[rng.index(INTERESTING_8.len())];
        }
        3 if len >= 2 => {
            let at = rng.index(len - 1);
            let v = INTERESTING_16[rng.index(INTERESTING_16.len())].to_be_bytes();
            buf[at..at + 2].copy_from_slice(&v);
        }
        4 | 5 if len >= 4 => {
            let at = rng.index(len - 3);
            let v = INTERESTING_32[rng.index(INTERESTING_32.len())].to_be_bytes();
            buf[at..at + 4].copy_from_slice(&v);
        }
        6 if len > 0 => buf.truncate(rng.index(len)),
        7 if len > 0 => {
            let from = rng.index(len);
            let to = (from + 1 + rng.index(16)).min(len);
            buf.drain(from..to);
        }
        8 if len > 0 => {
            let from = rng.index(len);
            let to = (from + 1 + rng.index(64)).min(len);
            let chunk = buf[from..to].to_vec();
            let at = rng.index(len + 1);
            buf.splice(at..at, chunk);
        }
        9 if !other.is_empty() => {
            let cut = rng.index(len + 1);
            let from = rng.index(other.len());
            buf.truncate(cut);
            buf.extend_from_slice(&other[from..]);
        }
        _ => {
            let at = rng.index(len + 1);
            let n = 1 + rng.index(8);
            let bytes: Vec<u8> = (0..n).map(|_| rng.next_u64() as u8).collect();
            buf.splice(at..at, bytes);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_seed_same_inputs() {
        let seed = b"0123456789abcdef".to_vec();
        let run = |s| {
            let mut rng = Rng::new(s);
            (0..100)
                .map(|_| mutate(&mut rng, &seed, b"xyz"))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(7), run(7));
        assert_ne!(run(7), run(8));
    }

    #[test]
    fn mutations_change_the_input_and_reach_every_length() {
        let seed = vec![0u8; 64];
        let mut rng = Rng::new(1);
        let outs: Vec<Vec<u8>> = (0..1000)
            .map(|_| mutate(&mut rng, &seed, &[1; 8]))
            .collect();
        assert!(outs.iter().filter(|o| **o != seed).count() > 900);
        assert!(outs.iter().any(|o| o.len() < 64));
        assert!(outs.iter().any(|o| o.len() > 64));
        assert!(
            outs.iter()
                .any(|o| o.windows(4).any(|w| w == [0x7f, 0xff, 0xff, 0xff]))
        );
    }

    #[test]
    fn empty_input_grows() {
        let mut rng = Rng::new(3);
        assert!((0..50).any(|_| !mutate(&mut rng, &[], &[]).is_empty()));
    }
}
