//! Text for the user's terminal: what sandboxed output may not do to it.

/// Removes terminal escape sequences that can act on the user's terminal (OSC: titles,
/// clipboard, hyperlinks; DCS/APC/PM/SOS strings) while keeping CSI sequences (colours).
pub fn sanitize_for_terminal(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len());
    let mut i = 0;
    while i < data.len() {
        let b = data[i];
        let starts_string =
            b == 0x1b && matches!(data.get(i + 1), Some(b']' | b'P' | b'_' | b'^' | b'X'));
        if starts_string || matches!(b, 0x90 | 0x9d | 0x9e | 0x9f | 0x98) {
            // Skip to the string terminator: BEL, ESC \ or ST (0x9c).
            i += if b == 0x1b { 2 } else { 1 };
            while i < data.len() {
                match data[i] {
                    0x07 | 0x9c => {
                        i += 1;
                        break;
                    }
                    0x1b if data.get(i + 1) == Some(&b'\\') => {
                        i += 2;
                        break;
                    }
                    _ => i += 1,
                }
            }
            continue;
        }
        out.push(b);
        i += 1;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::sanitize_for_terminal;

    #[test]
    fn osc_and_dcs_are_removed_colours_kept() {
        let s = b"a\x1b]0;title\x07b\x1b]52;c;ZXZpbA==\x1b\\c\x1b[31mred\x1b[0m\x1bPq#0\x1b\\d";
        assert_eq!(sanitize_for_terminal(s), b"abc\x1b[31mred\x1b[0md".to_vec());
    }
}
