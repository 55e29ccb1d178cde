//! Minimal deterministic ustar images of an in-memory file tree: the data
//! mode form of a synthetic version (fixed mode, owner and mtime, so equal
//! trees give equal bytes).

fn octal(field: &mut [u8], v: u64) {
    let n = field.len() - 1;
    let s = format!("{:0w$o}", v, w = n);
    field[..n].copy_from_slice(s.as_bytes());
    field[n] = 0;
}

fn header(path: &str, size: u64) -> [u8; 512] {
    let mut h = [0u8; 512];
    let p = path.as_bytes();
    assert!(p.len() < 100, "synthetic paths are short");
    h[..p.len()].copy_from_slice(p);
    octal(&mut h[100..108], 0o644);
    octal(&mut h[108..116], 0);
    octal(&mut h[116..124], 0);
    octal(&mut h[124..136], size);
    octal(&mut h[136..148], 0);
    h[156] = b'0';
    h[257..263].copy_from_slice(b"ustar\0");
    h[263..265].copy_from_slice(b"00");
    h[148..156].fill(b' ');
    let sum: u64 = h.iter().map(|&b| b as u64).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
    h
}

/// A tar image of `(path, bytes)` entries, in the given order.
pub fn image<'a>(files: impl Iterator<Item = (&'a str, &'a [u8])>) -> Vec<u8> {
    let mut out = Vec::new();
    for (path, data) in files {
        out.extend_from_slice(&header(path, data.len() as u64));
        out.extend_from_slice(data);
        out.resize(out.len().div_ceil(512) * 512, 0);
    }
    out.resize(out.len() + 1024, 0);
    out
}

/// Names and sizes of the entries of an image written by [`image`] (tests).
#[cfg(test)]
pub fn list(img: &[u8]) -> Vec<(String, usize)> {
    let mut v = Vec::new();
    let mut pos = 0;
    while pos + 512 <= img.len() && img[pos] != 0 {
        let h = &img[pos..pos + 512];
        let name_end = h[..100].iter().position(|&b| b == 0).unwrap_or(100);
        let name = String::from_utf8(h[..name_end].to_vec()).unwrap();
        let size_s = std::str::from_utf8(&h[124..135]).unwrap();
        let size = usize::from_str_radix(size_s, 8).unwrap();
        v.push((name, size));
        pos += 512 + size.div_ceil(512) * 512;
    }
    v
}
