//! A baseline JPEG encoder (JFIF, 8-bit YCbCr, 4:2:0, the example tables
//! of ITU-T T.81 Annex K), for the report's screenshots.
//!
//! Why here and not a crate: `jpeg-encoder` (what `image` uses too) is
//! licensed `(MIT OR Apache-2.0) AND IJG`, and deny.toml does not allow
//! IJG. A baseline encoder is small: colour conversion, a separable DCT
//! computed from its definition, quantisation, and Huffman coding with the
//! spec's tables. No progressive mode, no optimised tables, no restart
//! markers: the report only needs a compact image a browser shows.

/// Luminance quantisation (T.81 Table K.1), natural order.
const LUMA_Q: [u16; 64] = [
    16, 11, 10, 16, 24, 40, 51, 61, 12, 12, 14, 19, 26, 58, 60, 55, 14, 13, 16, 24, 40, 57, 69, 56,
    14, 17, 22, 29, 51, 87, 80, 62, 18, 22, 37, 56, 68, 109, 103, 77, 24, 35, 55, 64, 81, 104, 113,
    92, 49, 64, 78, 87, 103, 121, 120, 101, 72, 92, 95, 98, 112, 100, 103, 99,
];

/// Chrominance quantisation (T.81 Table K.2), natural order.
const CHROMA_Q: [u16; 64] = [
    17, 18, 24, 47, 99, 99, 99, 99, 18, 21, 26, 66, 99, 99, 99, 99, 24, 26, 56, 99, 99, 99, 99, 99,
    47, 66, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
    99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99, 99,
];

/// Zig-zag position -> natural index.
const ZIGZAG: [usize; 64] = [
    0, 1, 8, 16, 9, 2, 3, 10, 17, 24, 32, 25, 18, 11, 4, 5, 12, 19, 26, 33, 40, 48, 41, 34, 27, 20,
    13, 6, 7, 14, 21, 28, 35, 42, 49, 56, 57, 50, 43, 36, 29, 22, 15, 23, 30, 37, 44, 51, 58, 59,
    52, 45, 38, 31, 39, 46, 53, 60, 61, 54, 47, 55, 62, 63,
];

/// Huffman tables of T.81 K.3: code counts per length 1..=16, then the
/// symbols in code order.
const DC_LUMA_BITS: [u8; 16] = [0, 1, 5, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0];
const DC_CHROMA_BITS: [u8; 16] = [0, 3, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0];
const DC_VALS: [u8; 12] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11];
const AC_LUMA_BITS: [u8; 16] = [0, 2, 1, 3, 3, 2, 4, 3, 5, 5, 4, 4, 0, 0, 1, 0x7d];
const AC_LUMA_VALS: [u8; 162] = [
    0x01, 0x02, 0x03, 0x00, 0x04, 0x11, 0x05, 0x12, 0x21, 0x31, 0x41, 0x06, 0x13, 0x51, 0x61, 0x07,
    0x22, 0x71, 0x14, 0x32, 0x81, 0x91, 0xa1, 0x08, 0x23, 0x42, 0xb1, 0xc1, 0x15, 0x52, 0xd1, 0xf0,
    0x24, 0x33, 0x62, 0x72, 0x82, 0x09, 0x0a, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x25, 0x26, 0x27, 0x28,
    0x29, 0x2a, 0x34, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48, 0x49,
    0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68, 0x69,
    0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x83, 0x84, 0x85, 0x86, 0x87, 0x88, 0x89,
    0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7,
    0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3, 0xc4, 0xc5,
    0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda, 0xe1, 0xe2,
    0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf1, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
    0xf9, 0xfa,
];
const AC_CHROMA_BITS: [u8; 16] = [0, 2, 1, 2, 4, 4, 3, 4, 7, 5, 4, 4, 0, 1, 2, 0x77];
const AC_CHROMA_VALS: [u8; 162] = [
    0x00, 0x01, 0x02, 0x03, 0x11, 0x04, 0x05, 0x21, 0x31, 0x06, 0x12, 0x41, 0x51, 0x07, 0x61, 0x71,
    0x13, 0x22, 0x32, 0x81, 0x08, 0x14, 0x42, 0x91, 0xa1, 0xb1, 0xc1, 0x09, 0x23, 0x33, 0x52, 0xf0,
    0x15, 0x62, 0x72, 0xd1, 0x0a, 0x16, 0x24, 0x34, 0xe1, 0x25, 0xf1, 0x17, 0x18, 0x19, 0x1a, 0x26,
    0x27, 0x28, 0x29, 0x2a, 0x35, 0x36, 0x37, 0x38, 0x39, 0x3a, 0x43, 0x44, 0x45, 0x46, 0x47, 0x48,
    0x49, 0x4a, 0x53, 0x54, 0x55, 0x56, 0x57, 0x58, 0x59, 0x5a, 0x63, 0x64, 0x65, 0x66, 0x67, 0x68,
    0x69, 0x6a, 0x73, 0x74, 0x75, 0x76, 0x77, 0x78, 0x79, 0x7a, 0x82, 0x83, 0x84, 0x85, 0x86, 0x87,
    0x88, 0x89, 0x8a, 0x92, 0x93, 0x94, 0x95, 0x96, 0x97, 0x98, 0x99, 0x9a, 0xa2, 0xa3, 0xa4, 0xa5,
    0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xb2, 0xb3, 0xb4, 0xb5, 0xb6, 0xb7, 0xb8, 0xb9, 0xba, 0xc2, 0xc3,
    0xc4, 0xc5, 0xc6, 0xc7, 0xc8, 0xc9, 0xca, 0xd2, 0xd3, 0xd4, 0xd5, 0xd6, 0xd7, 0xd8, 0xd9, 0xda,
    0xe2, 0xe3, 0xe4, 0xe5, 0xe6, 0xe7, 0xe8, 0xe9, 0xea, 0xf2, 0xf3, 0xf4, 0xf5, 0xf6, 0xf7, 0xf8,
    0xf9, 0xfa,
];

/// A Huffman table: (code, length) per symbol.
struct Huffman {
    codes: [(u16, u8); 256],
}

impl Huffman {
    fn new(bits: &[u8; 16], vals: &[u8]) -> Huffman {
        let mut codes = [(0u16, 0u8); 256];
        let mut code: u16 = 0;
        let mut k = 0;
        for (i, &n) in bits.iter().enumerate() {
            for _ in 0..n {
                codes[usize::from(vals[k])] = (code, (i + 1) as u8);
                code += 1;
                k += 1;
            }
            code <<= 1;
        }
        Huffman { codes }
    }
}

/// Writes entropy-coded bits, stuffing a zero byte after each 0xFF.
struct Bits<'a> {
    out: &'a mut Vec<u8>,
    acc: u32,
    n: u32,
}

impl Bits<'_> {
    fn put(&mut self, value: u16, len: u8) {
        if len == 0 {
            return;
        }
        let len = u32::from(len);
        self.acc = (self.acc << len) | (u32::from(value) & ((1 << len) - 1));
        self.n += len;
        while self.n >= 8 {
            let byte = (self.acc >> (self.n - 8)) as u8;
            self.out.push(byte);
            if byte == 0xff {
                self.out.push(0);
            }
            self.n -= 8;
        }
        self.acc &= (1 << self.n) - 1;
    }

    fn code(&mut self, table: &Huffman, symbol: u8) {
        let (code, len) = table.codes[usize::from(symbol)];
        debug_assert!(len > 0, "symbol {symbol:#x} has no code");
        self.put(code, len);
    }

    /// Pads the last byte with ones.
    fn flush(&mut self) {
        if self.n > 0 {
            let pad = 8 - self.n;
            self.put((1 << pad) - 1, pad as u8);
        }
    }
}

/// `value`'s size category and its bits as JPEG codes them.
fn category(value: i32) -> (u8, u16) {
    let magnitude = value.unsigned_abs();
    let size = (32 - magnitude.leading_zeros()) as u8;
    let bits = if value < 0 {
        (value - 1) as u32 & ((1u32 << size) - 1)
    } else {
        value as u32
    };
    (size, bits as u16)
}

/// Scales a quantisation table for `quality` (1..=100), zig-zag order.
fn scaled(table: &[u16; 64], quality: u8) -> [u8; 64] {
    let q = u32::from(quality.clamp(1, 100));
    let scale = if q < 50 { 5000 / q } else { 200 - 2 * q };
    let mut out = [0u8; 64];
    for (k, &i) in ZIGZAG.iter().enumerate() {
        out[k] = ((u32::from(table[i]) * scale + 50) / 100).clamp(1, 255) as u8;
    }
    out
}

/// The DCT basis, `C(u)/2 * cos((2x+1)uπ/16)`, as `[u][x]`.
fn basis() -> [[f32; 8]; 8] {
    let mut c = [[0f32; 8]; 8];
    for (u, row) in c.iter_mut().enumerate() {
        let cu = if u == 0 {
            std::f32::consts::FRAC_1_SQRT_2
        } else {
            1.0
        };
        for (x, v) in row.iter_mut().enumerate() {
            *v = cu / 2.0 * ((2 * x + 1) as f32 * u as f32 * std::f32::consts::PI / 16.0).cos();
        }
    }
    c
}

struct Encoder {
    basis: [[f32; 8]; 8],
    luma_q: [u8; 64],
    chroma_q: [u8; 64],
    dc: [Huffman; 2],
    ac: [Huffman; 2],
}

impl Encoder {
    /// Encodes one level-shifted block with table `t` (0 luma, 1 chroma);
    /// `prev` is the component's previous DC.
    fn block(&self, bits: &mut Bits<'_>, s: &[f32; 64], t: usize, prev: &mut i32) {
        // Rows, then columns.
        let mut tmp = [0f32; 64];
        for y in 0..8 {
            for u in 0..8 {
                tmp[y * 8 + u] = (0..8).map(|x| self.basis[u][x] * s[y * 8 + x]).sum();
            }
        }
        let q = if t == 0 { &self.luma_q } else { &self.chroma_q };
        let mut zz = [0i32; 64];
        for (k, &i) in ZIGZAG.iter().enumerate() {
            let (v, u) = (i / 8, i % 8);
            let f: f32 = (0..8).map(|y| self.basis[v][y] * tmp[y * 8 + u]).sum();
            // Baseline's ranges: DC differences up to category 11, AC
            // values up to category 10.
            zz[k] = ((f / f32::from(q[k])).round() as i32).clamp(-1023, 1023);
        }
        let (size, b) = category(zz[0] - *prev);
        *prev = zz[0];
        bits.code(&self.dc[t], size);
        bits.put(b, size);
        let mut run = 0u8;
        for &c in &zz[1..] {
            if c == 0 {
                run += 1;
                continue;
            }
            while run > 15 {
                bits.code(&self.ac[t], 0xf0);
                run -= 16;
            }
            let (size, b) = category(c);
            bits.code(&self.ac[t], (run << 4) | size);
            bits.put(b, size);
            run = 0;
        }
        if run > 0 {
            bits.code(&self.ac[t], 0x00);
        }
    }
}

fn segment(out: &mut Vec<u8>, marker: u8, body: &[u8]) {
    out.extend_from_slice(&[0xff, marker]);
    out.extend_from_slice(&((body.len() + 2) as u16).to_be_bytes());
    out.extend_from_slice(body);
}

/// Encodes 8-bit RGB pixels (`width * height * 3` bytes, rows top to
/// bottom) as a baseline JFIF JPEG at `quality` (1..=100).
pub fn encode_rgb(rgb: &[u8], width: u16, height: u16, quality: u8) -> Result<Vec<u8>, String> {
    let (w, h) = (usize::from(width), usize::from(height));
    if w == 0 || h == 0 {
        return Err("an empty image".into());
    }
    if rgb.len() != w * h * 3 {
        return Err(format!(
            "{} bytes of pixels for a {w}x{h} RGB image",
            rgb.len()
        ));
    }
    let enc = Encoder {
        basis: basis(),
        luma_q: scaled(&LUMA_Q, quality),
        chroma_q: scaled(&CHROMA_Q, quality),
        dc: [
            Huffman::new(&DC_LUMA_BITS, &DC_VALS),
            Huffman::new(&DC_CHROMA_BITS, &DC_VALS),
        ],
        ac: [
            Huffman::new(&AC_LUMA_BITS, &AC_LUMA_VALS),
            Huffman::new(&AC_CHROMA_BITS, &AC_CHROMA_VALS),
        ],
    };
    // Full-resolution planes, level-shifted (-128).
    let mut planes = [vec![0f32; w * h], vec![0f32; w * h], vec![0f32; w * h]];
    for (i, p) in rgb.chunks_exact(3).enumerate() {
        let (r, g, b) = (f32::from(p[0]), f32::from(p[1]), f32::from(p[2]));
        planes[0][i] = 0.299 * r + 0.587 * g + 0.114 * b - 128.0;
        planes[1][i] = -0.168_736 * r - 0.331_264 * g + 0.5 * b;
        planes[2][i] = 0.5 * r - 0.418_688 * g - 0.081_312 * b;
    }
    let mut out = Vec::with_capacity(w * h / 4 + 1024);
    out.extend_from_slice(&[0xff, 0xd8]);
    segment(
        &mut out,
        0xe0,
        &[b'J', b'F', b'I', b'F', 0, 1, 1, 0, 0, 1, 0, 1, 0, 0],
    );
    let mut dqt = vec![0u8];
    dqt.extend_from_slice(&enc.luma_q);
    dqt.push(1);
    dqt.extend_from_slice(&enc.chroma_q);
    segment(&mut out, 0xdb, &dqt);
    let mut sof = vec![8];
    sof.extend_from_slice(&height.to_be_bytes());
    sof.extend_from_slice(&width.to_be_bytes());
    sof.extend_from_slice(&[3, 1, 0x22, 0, 2, 0x11, 1, 3, 0x11, 1]);
    segment(&mut out, 0xc0, &sof);
    let mut dht = Vec::new();
    for (class, bits, vals) in [
        (0x00, &DC_LUMA_BITS, &DC_VALS[..]),
        (0x10, &AC_LUMA_BITS, &AC_LUMA_VALS[..]),
        (0x01, &DC_CHROMA_BITS, &DC_VALS[..]),
        (0x11, &AC_CHROMA_BITS, &AC_CHROMA_VALS[..]),
    ] {
        dht.push(class);
        dht.extend_from_slice(bits);
        dht.extend_from_slice(vals);
    }
    segment(&mut out, 0xc4, &dht);
    segment(&mut out, 0xda, &[3, 1, 0x00, 2, 0x11, 3, 0x11, 0, 63, 0]);
    let mut bits = Bits {
        out: &mut out,
        acc: 0,
        n: 0,
    };
    // Samples outside the image repeat its last row or column.
    let at = |plane: &[f32], x: usize, y: usize| plane[y.min(h - 1) * w + x.min(w - 1)];
    let mut prev = [0i32; 3];
    let mut block = [0f32; 64];
    for my in (0..h).step_by(16) {
        for mx in (0..w).step_by(16) {
            for (bx, by) in [(0, 0), (8, 0), (0, 8), (8, 8)] {
                for (i, v) in block.iter_mut().enumerate() {
                    *v = at(&planes[0], mx + bx + i % 8, my + by + i / 8);
                }
                enc.block(&mut bits, &block, 0, &mut prev[0]);
            }
            for c in 1..3 {
                for (i, v) in block.iter_mut().enumerate() {
                    let (x, y) = (mx + 2 * (i % 8), my + 2 * (i / 8));
                    let p = &planes[c];
                    *v = (at(p, x, y) + at(p, x + 1, y) + at(p, x, y + 1) + at(p, x + 1, y + 1))
                        / 4.0;
                }
                enc.block(&mut bits, &block, 1, &mut prev[c]);
            }
        }
    }
    bits.flush();
    out.extend_from_slice(&[0xff, 0xd9]);
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_symbol_a_baseline_scan_can_need_has_a_code() {
        for (bits, vals) in [
            (&AC_LUMA_BITS, &AC_LUMA_VALS),
            (&AC_CHROMA_BITS, &AC_CHROMA_VALS),
        ] {
            let t = Huffman::new(bits, vals);
            let mut needed = vec![0x00u8, 0xf0];
            for run in 0..16u8 {
                for size in 1..=10u8 {
                    needed.push((run << 4) | size);
                }
            }
            for s in needed {
                assert!(t.codes[usize::from(s)].1 > 0, "AC symbol {s:#x}");
            }
            assert_eq!(bits.iter().map(|&b| usize::from(b)).sum::<usize>(), 162);
        }
        for bits in [&DC_LUMA_BITS, &DC_CHROMA_BITS] {
            let t = Huffman::new(bits, &DC_VALS);
            assert!((0..12).all(|s| t.codes[s].1 > 0));
        }
    }

    #[test]
    fn categories_are_the_spec_s() {
        assert_eq!(category(0), (0, 0));
        assert_eq!(category(1), (1, 1));
        assert_eq!(category(-1), (1, 0));
        assert_eq!(category(-3), (2, 0));
        assert_eq!(category(5), (3, 5));
        assert_eq!(category(-1023), (10, 0));
    }

    /// A decoder that is not ours reads it back close to the original.
    #[test]
    fn round_trips_through_an_independent_decoder() {
        let (w, h) = (83u16, 45u16); // not multiples of 16
        let mut rgb = Vec::new();
        for y in 0..h {
            for x in 0..w {
                let on = (x / 10 + y / 10) % 2 == 0;
                rgb.extend_from_slice(&[(x * 3) as u8, (y * 5) as u8, if on { 200 } else { 40 }]);
            }
        }
        let jpeg = encode_rgb(&rgb, w, h, 90).unwrap();
        let mut d =
            zune_jpeg::JpegDecoder::new(zune_jpeg::zune_core::bytestream::ZCursor::new(&jpeg));
        let back = d.decode().unwrap();
        let (dw, dh) = d.dimensions().unwrap();
        assert_eq!((dw, dh), (usize::from(w), usize::from(h)));
        assert_eq!(back.len(), rgb.len());
        // Luma: what 4:2:0 keeps at full resolution (the checkerboard's
        // blue edges are blurred by the subsampling of chroma, by design).
        let luma =
            |p: &[u8]| 0.299 * f64::from(p[0]) + 0.587 * f64::from(p[1]) + 0.114 * f64::from(p[2]);
        let mse = rgb
            .chunks_exact(3)
            .zip(back.chunks_exact(3))
            .map(|(a, b)| (luma(a) - luma(b)).powi(2))
            .sum::<f64>()
            / (f64::from(w) * f64::from(h));
        let psnr = 10.0 * (255.0f64 * 255.0 / mse).log10();
        assert!(psnr > 40.0, "luma PSNR {psnr:.1} dB");
        assert!(encode_rgb(&rgb, w, h + 1, 90).is_err());
    }
}
