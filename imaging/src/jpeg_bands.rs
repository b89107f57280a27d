//! Baseline JPEG on every core: the rows are cut into bands of whole MCU
//! rows, each band is encoded on its own thread as a JPEG of its own, and
//! the bands' entropy-coded data are joined into one JPEG with restart
//! markers between them (a DRI segment whose interval is a band's MCUs).
//!
//! A restart marker resets what the entropy coder carries from one MCU to
//! the next (the DC predictions) and starts on a byte boundary, which is
//! exactly where each band's encoder starts and ends. Every band is
//! encoded with the same tables (the quality's, standard Huffman tables)
//! and the same sampling, and its rows are whole MCU rows (16 with 4:2:0,
//! 8 with 4:4:4) except the last band's, which the encoder pads as it pads
//! the bottom of a whole image: the decoded pixels are those of the same
//! image encoded on one thread (a test holds it).
//!
//! Why: `jpeg-encoder` runs on one thread; a 1280x720 screenshot took
//! 6.1 ms to encode on it in `sandtopd bench`, under load (BENCHMARKS.md
//! "The floor, round three").

use rayon::prelude::*;

use crate::{Error, Layout, check};

/// Bands below this many pixels are not worth a thread of their own.
const MIN_BAND_PIXELS: usize = 128 * 1024;

/// Encodes baseline JPEGs on up to `rayon::current_num_threads()` threads,
/// keeping each band's output buffer between images.
#[derive(Default)]
pub struct JpegEncoder {
    bands: Vec<Vec<u8>>,
}

impl std::fmt::Debug for JpegEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JpegEncoder")
            .field("bands", &self.bands.len())
            .finish_non_exhaustive()
    }
}

/// Where a JPEG's headers end and its entropy-coded data begin.
struct Parts {
    /// The SOF0 segment's offset (its 0xff).
    sof: usize,
    /// The SOS segment's offset (its 0xff).
    sos: usize,
    /// The first byte of entropy-coded data (after the SOS segment).
    scan: usize,
}

/// Walks the markers of a JPEG `jpeg-encoder` wrote (SOI, segments, SOS).
fn parts(b: &[u8]) -> Result<Parts, Error> {
    let bad = || Error::Jpeg("the encoder's output is not a baseline JPEG".into());
    if b.len() < 4 || b[..2] != [0xff, 0xd8] || b[b.len() - 2..] != [0xff, 0xd9] {
        return Err(bad());
    }
    let mut i = 2;
    let mut sof = None;
    while i + 4 <= b.len() {
        if b[i] != 0xff {
            return Err(bad());
        }
        let len = usize::from(u16::from_be_bytes([b[i + 2], b[i + 3]]));
        match b[i + 1] {
            0xc0 => sof = Some(i),
            0xda => {
                return Ok(Parts {
                    sof: sof.ok_or_else(bad)?,
                    sos: i,
                    scan: i + 2 + len,
                });
            }
            _ => {}
        }
        i += 2 + len;
    }
    Err(bad())
}

impl JpegEncoder {
    pub fn new() -> JpegEncoder {
        JpegEncoder::default()
    }

    /// Appends `pixels` (`width x height`, packed in `layout`) to `out` as
    /// a baseline JPEG of `quality` (1-100): 8-bit YCbCr, the standard
    /// Huffman tables, 4:2:0 chroma below quality 90 and 4:4:4 from 90 on.
    /// A BGRX image is read as it is (its X byte ignored).
    pub fn encode(
        &mut self,
        out: &mut Vec<u8>,
        layout: Layout,
        pixels: &[u8],
        (width, height): (u32, u32),
        quality: u8,
    ) -> Result<(), Error> {
        check(layout, pixels, width, height)?;
        let side =
            |v: u32| u16::try_from(v).map_err(|_| Error::Jpeg(format!("{v} pixels is over 65535")));
        let (w, h) = (side(width)?, side(height)?);
        if w == 0 || h == 0 {
            return Err(Error::Jpeg("an image needs at least one pixel".into()));
        }
        let (sampling, mcu) = if quality < 90 {
            (jpeg_encoder::SamplingFactor::F_2_2, 16)
        } else {
            (jpeg_encoder::SamplingFactor::F_1_1, 8)
        };
        let color = match layout {
            Layout::Rgb => jpeg_encoder::ColorType::Rgb,
            // "Bgra": its fourth byte is never read (no alpha in a JPEG).
            Layout::Bgrx => jpeg_encoder::ColorType::Bgra,
        };
        let encode = |into: &mut Vec<u8>, rows: &[u8], band_h: u16| {
            let mut enc = jpeg_encoder::Encoder::new(into, quality);
            enc.set_sampling_factor(sampling);
            enc.encode(rows, w, band_h, color)
                .map_err(|e| Error::Jpeg(e.to_string()))
        };

        let mcu_rows = usize::from(h).div_ceil(mcu);
        let mcus_per_row = usize::from(w).div_ceil(mcu);
        let by_size = (usize::from(w) * usize::from(h) / MIN_BAND_PIXELS).max(1);
        let count = rayon::current_num_threads().min(by_size).min(mcu_rows);
        let rows_per_band = mcu_rows.div_ceil(count.max(1)) * mcu;
        let count = usize::from(h).div_ceil(rows_per_band);
        let interval = (rows_per_band / mcu) * mcus_per_row;
        let row_bytes = usize::from(w) * layout.bytes();
        let pixels = &pixels[..row_bytes * usize::from(h)];
        if count <= 1 || interval > usize::from(u16::MAX) {
            return encode(out, pixels, h);
        }

        while self.bands.len() < count {
            self.bands.push(Vec::new());
        }
        self.bands[..count]
            .par_iter_mut()
            .enumerate()
            .try_for_each(|(i, band)| {
                let first = i * rows_per_band;
                let end = (first + rows_per_band).min(usize::from(h));
                band.clear();
                // `end - first` is at most `h`: it fits.
                let band_h = u16::try_from(end - first).unwrap_or(h);
                encode(band, &pixels[first * row_bytes..end * row_bytes], band_h)
            })?;

        // The first band's headers, its frame header stating the whole
        // height, a DRI segment, its SOS; then every band's scan, with
        // RSTn between them; then EOI.
        let first = &self.bands[0];
        let p = parts(first)?;
        let start = out.len();
        out.extend_from_slice(&first[..p.sos]);
        out[start + p.sof + 5..start + p.sof + 7].copy_from_slice(&h.to_be_bytes());
        // `interval` is at most u16::MAX (checked above).
        let interval = u16::try_from(interval).unwrap_or(u16::MAX);
        out.extend_from_slice(&[0xff, 0xdd, 0x00, 0x04]);
        out.extend_from_slice(&interval.to_be_bytes());
        out.extend_from_slice(&first[p.sos..p.scan]);
        for (i, band) in self.bands[..count].iter().enumerate() {
            let p = parts(band)?;
            out.extend_from_slice(&band[p.scan..band.len() - 2]);
            if i + 1 < count {
                // RST0..RST7, in turn.
                out.extend_from_slice(&[0xff, 0xd0 + (i % 8) as u8]);
            }
        }
        out.extend_from_slice(&[0xff, 0xd9]);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> (jpeg_decoder::ImageInfo, Vec<u8>) {
        let mut d = jpeg_decoder::Decoder::new(bytes);
        let px = d.decode().unwrap();
        (d.info().unwrap(), px)
    }

    #[test]
    fn any_number_of_bands_decodes_to_the_pixels_of_one() {
        for (w, h) in [
            (1280u32, 720u32),
            (1283, 719),
            (1920, 1080),
            (700, 33),
            (5, 3),
        ] {
            let rgb = crate::tests::screen_like(w, h);
            let bgrx: Vec<u8> = rgb
                .chunks_exact(3)
                .flat_map(|p| [p[2], p[1], p[0], 0x77])
                .collect();
            for quality in [85, 95] {
                let mut one = Vec::new();
                crate::jpeg(&mut one, Layout::Bgrx, &bgrx, (w, h), quality).unwrap();
                let (_, want) = decode(&one);
                for threads in [1, 2, 3, 8] {
                    let pool = rayon::ThreadPoolBuilder::new()
                        .num_threads(threads)
                        .build()
                        .unwrap();
                    let mut out = b"keep".to_vec();
                    let mut enc = JpegEncoder::new();
                    pool.install(|| enc.encode(&mut out, Layout::Bgrx, &bgrx, (w, h), quality))
                        .unwrap();
                    assert_eq!(&out[..4], b"keep");
                    let (info, px) = decode(&out[4..]);
                    assert_eq!(
                        (u32::from(info.width), u32::from(info.height)),
                        (w, h),
                        "{w}x{h} q{quality} on {threads} threads"
                    );
                    assert_eq!(
                        info.coding_process,
                        jpeg_decoder::CodingProcess::DctSequential
                    );
                    assert!(
                        px == want,
                        "{w}x{h} q{quality} on {threads} threads: pixels differ from one band's"
                    );
                    // Reused: the same bytes again.
                    let mut again = Vec::new();
                    pool.install(|| enc.encode(&mut again, Layout::Bgrx, &bgrx, (w, h), quality))
                        .unwrap();
                    assert!(again == out[4..], "{w}x{h}: a reused encoder differs");
                }
            }
        }
    }

    #[test]
    fn bands_are_joined_with_restart_markers() {
        let (w, h) = (1280, 720);
        let rgb = crate::tests::screen_like(w, h);
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(3)
            .build()
            .unwrap();
        let mut out = Vec::new();
        pool.install(|| JpegEncoder::new().encode(&mut out, Layout::Rgb, &rgb, (w, h), 85))
            .unwrap();
        // 45 MCU rows in 3 bands of 15: 15 x 80 MCUs each, RST0 and RST1.
        let dri = out.windows(2).position(|m| m == [0xff, 0xdd]).unwrap();
        assert_eq!(
            &out[dri + 2..dri + 6],
            &[0, 4, (1200u16 >> 8) as u8, 1200u16 as u8]
        );
        let rst: Vec<u8> = out
            .windows(2)
            .filter(|m| m[0] == 0xff && (0xd0..=0xd7).contains(&m[1]))
            .map(|m| m[1])
            .collect();
        assert_eq!(rst, [0xd0, 0xd1]);
    }

    #[test]
    fn a_buffer_too_small_or_an_empty_image_is_an_error() {
        let mut enc = JpegEncoder::new();
        assert!(matches!(
            enc.encode(&mut Vec::new(), Layout::Bgrx, &[0; 15], (2, 2), 85),
            Err(Error::Size { needed: 16, .. })
        ));
        assert!(
            enc.encode(&mut Vec::new(), Layout::Rgb, &[], (0, 4), 85)
                .is_err()
        );
    }
}
