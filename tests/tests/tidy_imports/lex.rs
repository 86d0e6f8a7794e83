//! The import check's lexer: the tokens of a Rust file with comments and
//! the contents of character literals, lifetimes and numbers dropped,
//! enough to follow module declarations and paths.

#[derive(Debug, Clone, PartialEq)]
pub enum Token {
    Ident(String),
    Str(String),
    Path, // `::`
    Punct(char),
}

/// The tokens of a Rust file with comments, and the contents of character
/// literals, lifetimes and numbers, dropped: enough to follow module
/// declarations and paths.
pub fn lex(text: &str) -> Vec<Token> {
    let s: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    let ident_char = |c: char| c.is_alphanumeric() || c == '_';
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c.is_whitespace() {
            i += 1;
        } else if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    i += 1;
                }
            }
        } else if c == '"' || ((c == 'r' || c == 'b') && raw_or_byte_string_at(&s, i)) {
            let (value, end) = string_at(&s, i);
            out.push(Token::Str(value));
            i = end;
        } else if c == '\'' {
            // A character literal ('x', '\n', '\u{1F600}') or a lifetime ('a).
            if s.get(i + 1) == Some(&'\\') {
                i += 2;
                while i < s.len() && s[i] != '\'' {
                    i += 1;
                }
                i += 1;
            } else if s.get(i + 2) == Some(&'\'') {
                i += 3;
            } else {
                i += 1;
                while i < s.len() && ident_char(s[i]) {
                    i += 1;
                }
            }
        } else if c == '$' && s[i + 1..].starts_with(&['c', 'r', 'a', 't', 'e']) {
            // `$crate` inside a macro: the macro's crate, wherever it is used.
            out.push(Token::Ident("$crate".into()));
            i += 6;
        } else if c.is_ascii_digit() {
            while i < s.len() && (ident_char(s[i]) || s[i] == '.') {
                i += 1;
            }
        } else if ident_char(c) {
            let start = i;
            while i < s.len() && ident_char(s[i]) {
                i += 1;
            }
            let word: String = s[start..i].iter().collect();
            out.push(Token::Ident(word.trim_start_matches("r#").to_owned()));
        } else if c == ':' && next == Some(':') {
            out.push(Token::Path);
            i += 2;
        } else {
            out.push(Token::Punct(c));
            i += 1;
        }
    }
    out
}

pub fn raw_or_byte_string_at(s: &[char], i: usize) -> bool {
    let mut j = i;
    if s[j] == 'b' {
        j += 1;
    }
    if s.get(j) == Some(&'r') {
        j += 1;
        while s.get(j) == Some(&'#') {
            j += 1;
        }
    }
    j > i && s.get(j) == Some(&'"') && (i == 0 || !(s[i - 1].is_alphanumeric() || s[i - 1] == '_'))
}

/// The value of the string literal starting at `i` and the index after it.
pub fn string_at(s: &[char], mut i: usize) -> (String, usize) {
    let mut raw = false;
    if s[i] == 'b' {
        i += 1;
    }
    if s[i] == 'r' {
        raw = true;
        i += 1;
    }
    let mut hashes = 0;
    while s[i] == '#' {
        hashes += 1;
        i += 1;
    }
    i += 1; // the opening quote
    let mut value = String::new();
    while i < s.len() {
        if !raw && s[i] == '\\' {
            value.push(s[i]);
            value.push(*s.get(i + 1).unwrap_or(&' '));
            i += 2;
            continue;
        }
        if s[i] == '"' && (0..hashes).all(|h| s.get(i + 1 + h) == Some(&'#')) {
            return (value, i + 1 + hashes);
        }
        value.push(s[i]);
        i += 1;
    }
    (value, i)
}
