//! PNG on every core: the rows are cut into bands, each band is filtered
//! and deflated on its own thread, and the bands are joined into the one
//! zlib stream PNG requires (as pigz joins its blocks).
//!
//! - Filtering: every row with PNG's `Up` filter (the row minus the row
//!   above it). A band's first row takes the previous band's last row as
//!   "above", so the filtered bytes are exactly those one thread writes.
//! - Deflate: zlib-rs at level 1 (flate2), a raw stream per band. Every
//!   band but the last ends with a sync flush (an empty stored block: the
//!   stream is byte-aligned and not final there); the last one finishes.
//!   Concatenated behind a zlib header and followed by the Adler-32 of all
//!   the filtered bytes, they are one valid zlib stream.
//! - The container (signature, IHDR, IDAT, IEND, CRCs) is the `png`
//!   crate's.
//!
//! Why not `png::Compression::Fast` (fdeflate with adaptive filtering, one
//! thread): in `sandtopd bench` (1920x1080 -> 1280x720, two cores) PNG and
//! base64 took 2.59 ms with it and 2.06 ms in bands, and the reply shrank
//! from 576 kB to 437 kB (BENCHMARKS.md "The floor, round one").

use rayon::prelude::*;

use crate::{Error, Layout, check};

/// Rows below this many bytes of image are not worth a second thread.
const MIN_BAND_BYTES: usize = 256 * 1024;

/// One band's buffers and compressor, kept from one image to the next (a
/// screenshot a step allocates nothing new once the sizes are seen).
struct Band {
    filtered: Vec<u8>,
    deflated: Vec<u8>,
    z: flate2::Compress,
}

impl Band {
    fn new() -> Band {
        Band {
            filtered: Vec::new(),
            deflated: Vec::new(),
            z: flate2::Compress::new(flate2::Compression::new(1), false),
        }
    }
}

/// Encodes PNGs on up to `rayon::current_num_threads()` threads, keeping
/// its buffers between images.
#[derive(Default)]
pub struct PngEncoder {
    bands: Vec<Band>,
    zlib: Vec<u8>,
}

impl std::fmt::Debug for PngEncoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PngEncoder")
            .field("bands", &self.bands.len())
            .finish_non_exhaustive()
    }
}

impl PngEncoder {
    pub fn new() -> PngEncoder {
        PngEncoder::default()
    }

    /// Appends `rgb` (`width x height`, packed RGB, 8 bits) to `out` as a
    /// PNG.
    pub fn encode(&mut self, out: &mut Vec<u8>, rgb: &[u8], size: (u32, u32)) -> Result<(), Error> {
        self.encode_layout(out, Layout::Rgb, rgb, size)
    }

    /// Appends `pixels` (`width x height`, packed in `layout`) to `out` as
    /// an 8-bit RGB PNG. BGRX is turned into RGB inside the filter, band
    /// by band on every core, not in a pass of its own: the PNG is the
    /// one [`PngEncoder::encode`] writes for the same pixels as RGB, byte
    /// for byte.
    pub fn encode_layout(
        &mut self,
        out: &mut Vec<u8>,
        layout: Layout,
        pixels: &[u8],
        (width, height): (u32, u32),
    ) -> Result<(), Error> {
        check(layout, pixels, width, height)?;
        if width == 0 || height == 0 {
            return Err(Error::Png("an image needs at least one pixel".into()));
        }
        let row = width as usize * 3;
        let src_row = width as usize * layout.bytes();
        let pixels = &pixels[..src_row * height as usize];
        let by_size = (row * height as usize / MIN_BAND_BYTES).max(1);
        let count = rayon::current_num_threads()
            .min(by_size)
            .min(height as usize)
            .max(1);
        let rows_per_band = (height as usize).div_ceil(count);
        let count = (height as usize).div_ceil(rows_per_band);
        while self.bands.len() < count {
            self.bands.push(Band::new());
        }
        let last = count - 1;
        self.bands[..count]
            .par_iter_mut()
            .enumerate()
            .try_for_each(|(i, band)| {
                let first = i * rows_per_band;
                let end = (first + rows_per_band).min(height as usize);
                match layout {
                    Layout::Rgb => filter_up(pixels, row, first, end, &mut band.filtered),
                    Layout::Bgrx => {
                        filter_up_bgrx(pixels, width as usize, first, end, &mut band.filtered)
                    }
                }
                band.z.reset();
                band.deflated.clear();
                deflate_raw(&mut band.z, &band.filtered, i == last, &mut band.deflated)
            })?;
        let zlib = &mut self.zlib;
        zlib.clear();
        // CMF 0x78 (deflate, 32 KiB window), FLG 0x01 (fastest; check bits).
        zlib.extend_from_slice(&[0x78, 0x01]);
        let mut adler = simd_adler32::Adler32::new();
        for band in &self.bands[..count] {
            adler.write(&band.filtered);
            zlib.extend_from_slice(&band.deflated);
        }
        zlib.extend_from_slice(&adler.finish().to_be_bytes());

        let err = |e: png::EncodingError| Error::Png(e.to_string());
        let mut enc = png::Encoder::new(&mut *out, width, height);
        enc.set_color(png::ColorType::Rgb);
        enc.set_depth(png::BitDepth::Eight);
        let mut writer = enc.write_header().map_err(err)?;
        writer.write_chunk(png::chunk::IDAT, zlib).map_err(err)?;
        writer.finish().map_err(err)
    }
}

/// Appends `rgb` (`width x height`, packed RGB, 8 bits) to `out` as a PNG
/// (a one-off [`PngEncoder`]).
pub fn png_rgb(out: &mut Vec<u8>, rgb: &[u8], size: (u32, u32)) -> Result<(), Error> {
    PngEncoder::new().encode(out, rgb, size)
}

/// Rows `first..end` of the image into `out`, each behind its filter byte
/// (2, Up), minus the row above it (zeros above the image's first row).
fn filter_up(rgb: &[u8], row: usize, first: usize, end: usize, out: &mut Vec<u8>) {
    out.clear();
    out.resize((end - first) * (row + 1), 0);
    for (y, dst) in (first..end).zip(out.chunks_exact_mut(row + 1)) {
        dst[0] = 2;
        let cur = &rgb[y * row..(y + 1) * row];
        if y == 0 {
            dst[1..].copy_from_slice(cur);
        } else {
            let above = &rgb[(y - 1) * row..y * row];
            for ((d, c), a) in dst[1..].iter_mut().zip(cur).zip(above) {
                *d = c.wrapping_sub(*a);
            }
        }
    }
}

/// [`filter_up`] of a BGRX image: rows `first..end` as RGB, each behind
/// its filter byte (2, Up), minus the row above it as RGB.
fn filter_up_bgrx(bgrx: &[u8], width: usize, first: usize, end: usize, out: &mut Vec<u8>) {
    let (row, src_row) = (width * 3, width * 4);
    out.clear();
    out.resize((end - first) * (row + 1), 0);
    for (y, dst) in (first..end).zip(out.chunks_exact_mut(row + 1)) {
        dst[0] = 2;
        let cur = &bgrx[y * src_row..(y + 1) * src_row];
        let dst = &mut dst[1..];
        if y == 0 {
            for (d, c) in dst.chunks_exact_mut(3).zip(cur.chunks_exact(4)) {
                d[0] = c[2];
                d[1] = c[1];
                d[2] = c[0];
            }
        } else {
            let above = &bgrx[(y - 1) * src_row..y * src_row];
            for ((d, c), a) in dst
                .chunks_exact_mut(3)
                .zip(cur.chunks_exact(4))
                .zip(above.chunks_exact(4))
            {
                d[0] = c[2].wrapping_sub(a[2]);
                d[1] = c[1].wrapping_sub(a[1]);
                d[2] = c[0].wrapping_sub(a[0]);
            }
        }
    }
}

/// `data` as raw deflate into `out` with `z` (fresh or reset): finished
/// when `last`, else ended by a sync flush (byte-aligned, more may follow).
fn deflate_raw(
    z: &mut flate2::Compress,
    data: &[u8],
    last: bool,
    out: &mut Vec<u8>,
) -> Result<(), Error> {
    use flate2::{FlushCompress, Status};
    let flush = if last {
        FlushCompress::Finish
    } else {
        FlushCompress::Sync
    };
    out.reserve(data.len() / 2 + 1024);
    loop {
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity().max(4096));
        }
        let consumed = usize::try_from(z.total_in()).unwrap_or(usize::MAX);
        let status = z
            .compress_vec(&data[consumed.min(data.len())..], out, flush)
            .map_err(|e| Error::Png(format!("deflate: {e}")))?;
        let all_in = z.total_in() == data.len() as u64;
        match status {
            Status::StreamEnd => return Ok(()),
            // A flush is complete when all the input went in and the
            // output was not full (zlib's rule for calling again).
            Status::Ok | Status::BufError if !last && all_in && out.len() < out.capacity() => {
                return Ok(());
            }
            Status::Ok | Status::BufError => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decode(bytes: &[u8]) -> (png::OutputInfo, Vec<u8>) {
        let mut reader = png::Decoder::new(std::io::Cursor::new(bytes))
            .read_info()
            .unwrap();
        let mut buf = vec![0; reader.output_buffer_size().unwrap()];
        let info = reader.next_frame(&mut buf).unwrap();
        buf.truncate(info.buffer_size());
        (info, buf)
    }

    /// A screen-like picture: flat areas, edges, text-like stripes, noise.
    fn picture(w: u32, h: u32) -> Vec<u8> {
        let mut v = Vec::with_capacity((w * h * 3) as usize);
        let mut seed = 0x2545_f491_u32;
        for y in 0..h {
            for x in 0..w {
                seed ^= seed << 13;
                seed ^= seed >> 17;
                seed ^= seed << 5;
                let px = if y < h / 8 {
                    [40, 44, 52]
                } else if x > w / 2 && y > h / 2 {
                    [seed as u8, (seed >> 8) as u8, (seed >> 16) as u8]
                } else if (y / 3) % 5 == 0 && (x / 2) % 7 != 0 {
                    [20, 20, 20]
                } else {
                    [(x * 255 / w) as u8, (y * 255 / h) as u8, 200]
                };
                v.extend_from_slice(&px);
            }
        }
        v
    }

    #[test]
    fn any_number_of_bands_decodes_to_the_same_pixels() {
        for (w, h) in [(1, 1), (3, 2), (640, 1), (1280, 720), (1283, 719)] {
            let rgb = picture(w, h);
            let mut outs = Vec::new();
            for threads in [1, 2, 3, 8] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let mut out = Vec::new();
                pool.install(|| png_rgb(&mut out, &rgb, (w, h))).unwrap();
                let (info, px) = decode(&out);
                assert_eq!((info.width, info.height), (w, h));
                assert_eq!(info.color_type, png::ColorType::Rgb);
                assert_eq!(px, rgb, "{w}x{h} on {threads} threads");
                outs.push(out.len());
            }
            eprintln!("{w}x{h}: {outs:?} bytes on 1, 2, 3, 8 threads");
        }
    }

    #[test]
    fn one_encoder_reused_across_sizes_and_band_counts_stays_exact() {
        let mut enc = PngEncoder::new();
        for (w, h) in [(1280, 720), (7, 3), (1920, 1080), (1280, 720), (1, 1)] {
            let rgb = picture(w, h);
            let mut out = Vec::new();
            enc.encode(&mut out, &rgb, (w, h)).unwrap();
            assert_eq!(decode(&out).1, rgb, "{w}x{h}");
        }
    }

    #[test]
    fn bgrx_in_gives_the_png_of_its_rgb_byte_for_byte() {
        for (w, h) in [(1, 1), (3, 2), (1280, 720), (1283, 719)] {
            let rgb = picture(w, h);
            let bgrx: Vec<u8> = rgb
                .chunks_exact(3)
                .enumerate()
                .flat_map(|(i, p)| [p[2], p[1], p[0], i as u8])
                .collect();
            for threads in [1, 2, 3] {
                let pool = rayon::ThreadPoolBuilder::new()
                    .num_threads(threads)
                    .build()
                    .unwrap();
                let (mut a, mut b) = (Vec::new(), Vec::new());
                let mut enc = PngEncoder::new();
                pool.install(|| {
                    enc.encode(&mut a, &rgb, (w, h)).unwrap();
                    enc.encode_layout(&mut b, Layout::Bgrx, &bgrx, (w, h))
                        .unwrap();
                });
                assert!(a == b, "{w}x{h} on {threads} threads: the PNGs differ");
                assert_eq!(decode(&b).1, rgb, "{w}x{h}");
            }
        }
        assert!(matches!(
            PngEncoder::new().encode_layout(&mut Vec::new(), Layout::Bgrx, &[0; 15], (2, 2)),
            Err(Error::Size { needed: 16, .. })
        ));
    }

    #[test]
    fn a_buffer_smaller_than_the_image_is_refused() {
        let mut out = Vec::new();
        assert!(matches!(
            png_rgb(&mut out, &[0; 11], (2, 2)),
            Err(Error::Size { .. })
        ));
        assert!(out.is_empty());
    }
}
