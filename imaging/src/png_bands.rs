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
//! thread): on a 1280x720 screen it takes ~2.6 ms where two bands take
//! about half that, for files of about the same size (BENCHMARKS.md).

use rayon::prelude::*;

use crate::{Error, Layout, check};

/// Rows below this many bytes of image are not worth a second thread.
const MIN_BAND_BYTES: usize = 256 * 1024;

/// Appends `rgb` (`width x height`, packed RGB, 8 bits) to `out` as a PNG,
/// compressed on up to `rayon::current_num_threads()` threads.
pub fn png_rgb(out: &mut Vec<u8>, rgb: &[u8], (width, height): (u32, u32)) -> Result<(), Error> {
    check(Layout::Rgb, rgb, width, height)?;
    if width == 0 || height == 0 {
        return Err(Error::Png("an image needs at least one pixel".into()));
    }
    let row = width as usize * 3;
    let rgb = &rgb[..row * height as usize];
    let by_size = (rgb.len() / MIN_BAND_BYTES).max(1);
    let bands = rayon::current_num_threads()
        .min(by_size)
        .min(height as usize)
        .max(1);
    let rows_per_band = (height as usize).div_ceil(bands);
    let starts: Vec<usize> = (0..height as usize).step_by(rows_per_band).collect();
    let last = starts.len() - 1;
    let parts: Vec<Result<(Vec<u8>, Vec<u8>), Error>> = starts
        .par_iter()
        .enumerate()
        .map(|(i, &first)| {
            let end = (first + rows_per_band).min(height as usize);
            let filtered = filter_up(rgb, row, first, end);
            let deflated = deflate_raw(&filtered, i == last)?;
            Ok((filtered, deflated))
        })
        .collect();
    let mut zlib = Vec::with_capacity(
        parts
            .iter()
            .map(|p| p.as_ref().map_or(0, |p| p.1.len()))
            .sum::<usize>()
            + 6,
    );
    // CMF 0x78 (deflate, 32 KiB window), FLG 0x01 (fastest; check bits).
    zlib.extend_from_slice(&[0x78, 0x01]);
    let mut adler = simd_adler32::Adler32::new();
    for part in parts {
        let (filtered, deflated) = part?;
        adler.write(&filtered);
        zlib.extend_from_slice(&deflated);
    }
    zlib.extend_from_slice(&adler.finish().to_be_bytes());

    let err = |e: png::EncodingError| Error::Png(e.to_string());
    let mut enc = png::Encoder::new(&mut *out, width, height);
    enc.set_color(png::ColorType::Rgb);
    enc.set_depth(png::BitDepth::Eight);
    let mut writer = enc.write_header().map_err(err)?;
    writer.write_chunk(png::chunk::IDAT, &zlib).map_err(err)?;
    writer.finish().map_err(err)
}

/// Rows `first..end` of the image, each behind its filter byte (2, Up),
/// minus the row above it (zeros above the first row of the image).
fn filter_up(rgb: &[u8], row: usize, first: usize, end: usize) -> Vec<u8> {
    let mut out = vec![0u8; (end - first) * (row + 1)];
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
    out
}

/// A raw deflate stream of `data` at level 1: finished when `last`, else
/// ended by a sync flush (byte-aligned, more blocks may follow).
fn deflate_raw(data: &[u8], last: bool) -> Result<Vec<u8>, Error> {
    use flate2::{Compress, Compression, FlushCompress, Status};
    let mut z = Compress::new(Compression::new(1), false);
    let mut out = Vec::with_capacity(data.len() / 2 + 1024);
    let flush = if last {
        FlushCompress::Finish
    } else {
        FlushCompress::Sync
    };
    loop {
        if out.capacity() - out.len() < 64 {
            out.reserve(out.capacity().max(4096));
        }
        let consumed = usize::try_from(z.total_in()).unwrap_or(usize::MAX);
        let status = z
            .compress_vec(&data[consumed.min(data.len())..], &mut out, flush)
            .map_err(|e| Error::Png(format!("deflate: {e}")))?;
        let all_in = z.total_in() == data.len() as u64;
        match status {
            Status::StreamEnd => return Ok(out),
            // A flush is complete when all the input went in and the
            // output was not full (zlib's rule for calling again).
            Status::Ok | Status::BufError if !last && all_in && out.len() < out.capacity() => {
                return Ok(out);
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
    fn a_buffer_smaller_than_the_image_is_refused() {
        let mut out = Vec::new();
        assert!(matches!(
            png_rgb(&mut out, &[0; 11], (2, 2)),
            Err(Error::Size { .. })
        ));
        assert!(out.is_empty());
    }
}
