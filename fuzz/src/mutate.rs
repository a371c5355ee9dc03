//! A seeded byte-level mutator for running the harnesses on the stable toolchain
//! (`tests/mutations.rs`): stacked bit flips, interesting values written over length and count
//! fields, truncation, deletion, duplication, insertion and splicing with another seed. The
//! same seed gives the same sequence of inputs.

/// splitmix64: small, seeded, and good enough to choose mutations.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from `seed`.
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (0 when `n` is 0).
    pub fn below(&mut self, n: usize) -> usize {
        if n == 0 {
            0
        } else {
            (self.next_u64() % n as u64) as usize
        }
    }
}

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
    for _ in 0..1 + rng.below(4) {
        mutate_once(rng, &mut out, other);
    }
    out
}

fn mutate_once(rng: &mut Rng, buf: &mut Vec<u8>, other: &[u8]) {
    let len = buf.len();
    match rng.below(10) {
        0 | 1 if len > 0 => {
            let at = rng.below(len);
            buf[at] ^= 1 << rng.below(8);
        }
        2 if len > 0 => {
            let at = rng.below(len);
            buf[at] = INTERESTING_8[rng.below(INTERESTING_8.len())];
        }
        3 if len >= 2 => {
            let at = rng.below(len - 1);
            let v = INTERESTING_16[rng.below(INTERESTING_16.len())].to_be_bytes();
            buf[at..at + 2].copy_from_slice(&v);
        }
        4 | 5 if len >= 4 => {
            let at = rng.below(len - 3);
            let v = INTERESTING_32[rng.below(INTERESTING_32.len())].to_be_bytes();
            buf[at..at + 4].copy_from_slice(&v);
        }
        6 if len > 0 => buf.truncate(rng.below(len)),
        7 if len > 0 => {
            let from = rng.below(len);
            let to = (from + 1 + rng.below(16)).min(len);
            buf.drain(from..to);
        }
        8 if len > 0 => {
            let from = rng.below(len);
            let to = (from + 1 + rng.below(64)).min(len);
            let chunk = buf[from..to].to_vec();
            let at = rng.below(len + 1);
            buf.splice(at..at, chunk);
        }
        9 if !other.is_empty() => {
            let cut = rng.below(len + 1);
            let from = rng.below(other.len());
            buf.truncate(cut);
            buf.extend_from_slice(&other[from..]);
        }
        _ => {
            let at = rng.below(len + 1);
            let n = 1 + rng.below(8);
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
