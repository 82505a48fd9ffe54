//! A decoder's `tokenizer.json` (Hugging Face's format, as exporters save it beside the
//! model), for prompts and generated tokens as text.

use std::path::{Path, PathBuf};

use crate::Error;

/// A loaded tokenizer.
pub struct TextCodec {
    inner: tokenizers::Tokenizer,
    path: PathBuf,
}

impl TextCodec {
    /// The `tokenizer.json` beside the model a connection file names, when there is one.
    pub fn beside(conn: &Path) -> Result<Option<PathBuf>, Error> {
        let source = crate::conn_source_path(conn)?;
        let source = source.canonicalize().unwrap_or(source);
        let path = source
            .parent()
            .unwrap_or(Path::new("."))
            .join("tokenizer.json");
        Ok(path.is_file().then_some(path))
    }

    /// Reads `path`; a file that is not a tokenizer is an argument error naming it.
    pub fn load(path: &Path) -> Result<TextCodec, Error> {
        let inner = tokenizers::Tokenizer::from_file(path).map_err(|e| {
            Error::argument(
                path,
                format!("not a tokenizer.json: {}", one_line(&e.to_string())),
            )
        })?;
        Ok(TextCodec {
            inner,
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The token ids of `text` (no special tokens added: the prompt is as given).
    pub fn encode(&self, text: &str) -> Result<Vec<i64>, Error> {
        let enc = self.inner.encode(text, false).map_err(|e| {
            Error::argument(
                &self.path,
                format!("cannot encode the prompt: {}", one_line(&e.to_string())),
            )
        })?;
        Ok(enc.get_ids().iter().map(|&i| i64::from(i)).collect())
    }

    /// The text of `ids`; an id outside the vocabulary is an error naming it.
    pub fn decode(&self, ids: &[i64]) -> Result<String, Error> {
        let ids: Vec<u32> = ids
            .iter()
            .map(|&i| {
                u32::try_from(i).map_err(|_| {
                    Error::argument(&self.path, format!("token {i} is not in the vocabulary"))
                })
            })
            .collect::<Result<_, _>>()?;
        self.inner.decode(&ids, true).map_err(|e| {
            Error::argument(
                &self.path,
                format!("cannot decode: {}", one_line(&e.to_string())),
            )
        })
    }
}

fn one_line(s: &str) -> String {
    s.lines()
        .next()
        .unwrap_or_default()
        .chars()
        .take(240)
        .collect()
}
