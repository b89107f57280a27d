//! Pixel counts of a PNG screenshot, for tests that ask whether a screen
//! is (nearly) empty.

/// The share of `png_bytes`' pixels, its bottom `bottom_rows_left_out`
/// rows left out (a panel), whose colour is not `background`: about 0 for
/// an empty desktop.
pub fn share_not(png_bytes: &[u8], background: [u8; 3], bottom_rows_left_out: u32) -> f64 {
    let mut dec = png::Decoder::new(std::io::Cursor::new(png_bytes));
    dec.set_transformations(png::Transformations::EXPAND | png::Transformations::STRIP_16);
    let mut reader = dec.read_info().expect("a PNG");
    let mut buf = vec![0; reader.output_buffer_size().expect("a PNG's size")];
    let info = reader.next_frame(&mut buf).expect("a PNG frame");
    let px = info.color_type.samples();
    let rows = info.height.saturating_sub(bottom_rows_left_out) as usize;
    let pixels = &buf[..rows * info.width as usize * px];
    let lit = pixels
        .chunks_exact(px)
        .filter(|p| p[..3] != background)
        .count();
    lit as f64 / (pixels.len() / px).max(1) as f64
}
