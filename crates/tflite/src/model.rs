//! A TFLite or circle file, memory-mapped and verified once, read in place.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use cleave_frontend::FrontendError;

use crate::schema::{circle, tflite};

/// The two flavours of the schema cleave reads. circle is TFLite's schema with negative
/// operator and type codes for ONE's own, a few fields reinterpreted, and its own file
/// identifier; everything this crate reads is laid out alike in both.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Format {
    Tflite,
    Circle,
}

impl Format {
    pub fn name(self) -> &'static str {
        match self {
            Format::Tflite => "tflite",
            Format::Circle => "circle",
        }
    }

    /// The file identifier at bytes 4..8.
    pub fn identifier(self) -> &'static str {
        match self {
            Format::Tflite => "TFL3",
            Format::Circle => "CIR0",
        }
    }

    /// The extension of files in this format.
    pub fn extension(self) -> &'static str {
        self.name()
    }

    /// The format a file's identifier names.
    pub fn of_bytes(data: &[u8]) -> Option<Format> {
        match data.get(4..8)? {
            b"TFL3" => Some(Format::Tflite),
            b"CIR0" => Some(Format::Circle),
            _ => None,
        }
    }

    fn of_extension(path: &Path) -> Option<Format> {
        let ext = path.extension()?.to_str()?.to_ascii_lowercase();
        match ext.as_str() {
            "tflite" => Some(Format::Tflite),
            "circle" => Some(Format::Circle),
            _ => None,
        }
    }
}

/// A loaded model file: its bytes (a memory map, shared) and which schema they follow.
#[derive(Clone)]
pub struct FlatModel {
    pub path: PathBuf,
    pub format: Format,
    pub data: Bytes,
}

/// Limits for the verifier: real models have hundreds of thousands of tables and files near
/// 2 GiB, past flatbuffers' defaults; depth stays bounded because the schema is shallow.
fn verifier_options() -> flatbuffers::VerifierOptions {
    flatbuffers::VerifierOptions {
        max_depth: 64,
        max_tables: 100_000_000,
        max_apparent_size: 1 << 32,
        ignore_missing_null_terminator: false,
    }
}

fn one_line(s: &str) -> String {
    s.split_whitespace().collect::<Vec<_>>().join(" ")
}

impl FlatModel {
    /// Maps and verifies a file.
    pub fn load(path: &Path) -> Result<FlatModel, FrontendError> {
        let io = |e: std::io::Error| FrontendError::io(path, format!("cannot read: {e}"), e);
        let file = std::fs::File::open(path).map_err(io)?;
        // SAFETY: the map is read-only; cleave never writes to a model it reads, and a file
        // changed underneath by another program is outside what any reader can defend.
        let map = unsafe { memmap2::Mmap::map(&file) }.map_err(io)?;
        FlatModel::from_bytes(path, Bytes::from_owner(map))
    }

    /// Verifies bytes read from `path`.
    pub fn from_bytes(path: &Path, data: Bytes) -> Result<FlatModel, FrontendError> {
        let err = |m: String| FrontendError::new(path, m);
        let expected = Format::of_extension(path);
        let what = expected.map_or("a TFLite or circle model", |f| match f {
            Format::Tflite => "a TFLite model",
            Format::Circle => "a circle model",
        });
        if data.len() < 8 {
            return Err(err(format!(
                "not {what}: {} bytes, too short for a flatbuffer",
                data.len()
            )));
        }
        let format = match Format::of_bytes(&data) {
            Some(f) => f,
            None => {
                let id = String::from_utf8_lossy(&data[4..8])
                    .escape_debug()
                    .to_string();
                let want = expected.map_or("'TFL3' or 'CIR0'".to_string(), |f| {
                    format!("'{}'", f.identifier())
                });
                return Err(err(format!(
                    "not {what}: file identifier is '{id}', expected {want}"
                )));
            }
        };
        let verified = match format {
            Format::Tflite => {
                tflite::root_as_model_with_opts(&verifier_options(), &data).map(|_| ())
            }
            Format::Circle => {
                circle::root_as_model_with_opts(&verifier_options(), &data).map(|_| ())
            }
        };
        verified.map_err(|e| {
            err(format!(
                "not a valid {} flatbuffer, or truncated ({})",
                format.name(),
                one_line(&e.to_string())
            ))
        })?;
        Ok(FlatModel {
            path: path.to_path_buf(),
            format,
            data,
        })
    }

    /// The root table, read through TFLite's accessors for both formats: the tables, and the
    /// fields this crate reads through them, are laid out alike in both schemas; where they
    /// differ (codes, Tensor slot 10, SubGraph slot 5) `codes.rs` decodes per format.
    pub fn root(&self) -> tflite::Model<'_> {
        // SAFETY: `data` was verified in `from_bytes` against its own schema and is immutable
        // (shared `Bytes`); every table TFLite's accessors reach has the same layout there.
        unsafe { tflite::root_as_model_unchecked(&self.data) }
    }
}
