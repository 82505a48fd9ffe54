//! Writing a model through the generated object API, with buffer data 16-byte aligned as the
//! schema's `force_align` asks (flatbuffers' Rust builder ignores that attribute), inline or,
//! past flatbuffers' 2 GiB limit, after the flatbuffer at `Buffer.offset`.

use flatbuffers::{FlatBufferBuilder, Push, PushAlignment, WIPOffset};

/// Where buffer data goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Inside the flatbuffer (files up to 2 GiB).
    Inline,
    /// After the flatbuffer, each buffer at `offset`/`size` from the start of the file.
    Offsets,
}

/// Data above this much goes after the flatbuffer: the builder cannot grow past 2 GiB, and
/// the tables need room too.
pub const INLINE_LIMIT: u64 = 1_900_000_000;

/// The alignment TFLite asks of buffer data.
pub const DATA_ALIGN: usize = 16;

/// A zero-sized value pushed only to raise the builder's alignment to 16 bytes, so that the
/// finished buffer's size is a multiple of 16 and aligned offsets from its end are aligned
/// from its start.
struct Align16;

impl Push for Align16 {
    type Output = [u8; 0];

    unsafe fn push(&self, _dst: &mut [u8], _written_len: usize) {}

    fn size() -> usize {
        0
    }

    fn alignment() -> PushAlignment {
        PushAlignment::new(DATA_ALIGN)
    }
}

/// A `[ubyte]` vector whose first element lands on a 16-byte boundary of the finished
/// buffer.
pub fn aligned_bytes<'a>(
    fbb: &mut FlatBufferBuilder<'a>,
    data: &[u8],
) -> WIPOffset<flatbuffers::Vector<'a, u8>> {
    fbb.push(Align16);
    let used = fbb.unfinished_data().len();
    // The builder writes back to front: the data starts `used + pad + len` bytes from the end,
    // and the end is 16-aligned once finished.
    let pad = (DATA_ALIGN - (used + data.len()) % DATA_ALIGN) % DATA_ALIGN;
    for _ in 0..pad {
        fbb.push(0u8);
    }
    fbb.create_vector(data)
}

/// Pads `out` with zeros to a multiple of 16.
pub fn pad_to_alignment(out: &mut Vec<u8>) {
    let pad = (DATA_ALIGN - out.len() % DATA_ALIGN) % DATA_ALIGN;
    out.resize(out.len() + pad, 0);
}

/// The offsets buffers get when appended, in order, after a flatbuffer of `fb_len` bytes.
pub fn appended_offsets(fb_len: usize, sizes: &[usize]) -> Vec<u64> {
    let mut at = fb_len.div_ceil(DATA_ALIGN) * DATA_ALIGN;
    sizes
        .iter()
        .map(|&n| {
            let o = at as u64;
            at += n.div_ceil(DATA_ALIGN) * DATA_ALIGN;
            o
        })
        .collect()
}

/// Generates, for one schema module, the functions that pack a `ModelT` (with its buffers
/// left out) together with buffer data given as slices.
macro_rules! packer {
    ($schema:ident) => {
        // TFLite's Model has fields circle's lacks, so the struct update is empty for one.
        #[allow(clippy::needless_update)]
        pub mod $schema {
            use flatbuffers::FlatBufferBuilder;

            use super::{aligned_bytes, appended_offsets, pad_to_alignment, Layout};
            use crate::schema::$schema as s;

            /// `model` (its `buffers` ignored) with `buffers[i]` as buffer `i`'s data,
            /// finished with `identifier`.
            pub fn pack(
                model: &s::ModelT,
                buffers: &[&[u8]],
                layout: Layout,
                identifier: &str,
            ) -> Vec<u8> {
                match layout {
                    Layout::Inline => build(model, buffers, None, identifier),
                    Layout::Offsets => {
                        let sizes: Vec<usize> = buffers.iter().map(|b| b.len()).collect();
                        // Offsets are always written (never the default), so the flatbuffer's
                        // size does not depend on their values: size it once with stand-ins.
                        let stand_in: Vec<u64> = (0..sizes.len() as u64).map(|i| i + 2).collect();
                        let probe = build(model, buffers, Some(&stand_in), identifier);
                        let offsets = appended_offsets(probe.len(), &sizes);
                        let mut out = build(model, buffers, Some(&offsets), identifier);
                        for b in buffers {
                            pad_to_alignment(&mut out);
                            out.extend_from_slice(b);
                        }
                        out
                    }
                }
            }

            fn build(
                model: &s::ModelT,
                buffers: &[&[u8]],
                offsets: Option<&[u64]>,
                identifier: &str,
            ) -> Vec<u8> {
                let inline: usize = if offsets.is_some() {
                    0
                } else {
                    buffers.iter().map(|b| b.len() + 32).sum()
                };
                let mut fbb = FlatBufferBuilder::with_capacity(inline + (1 << 16));
                let mut bufs = Vec::with_capacity(buffers.len());
                for (i, data) in buffers.iter().enumerate() {
                    let args = match offsets {
                        Some(o) if !data.is_empty() => s::BufferArgs {
                            data: None,
                            offset: o[i],
                            size: data.len() as u64,
                        },
                        _ if !data.is_empty() => s::BufferArgs {
                            data: Some(aligned_bytes(&mut fbb, data)),
                            offset: 0,
                            size: 0,
                        },
                        _ => s::BufferArgs::default(),
                    };
                    bufs.push(s::Buffer::create(&mut fbb, &args));
                }
                let buffers = fbb.create_vector(&bufs);
                let operator_codes = model.operator_codes.as_ref().map(|v| {
                    let w: Vec<_> = v.iter().map(|x| x.pack(&mut fbb)).collect();
                    fbb.create_vector(&w)
                });
                let subgraphs = model.subgraphs.as_ref().map(|v| {
                    let w: Vec<_> = v.iter().map(|x| x.pack(&mut fbb)).collect();
                    fbb.create_vector(&w)
                });
                let description = model.description.as_ref().map(|d| fbb.create_string(d));
                let metadata_buffer = model.metadata_buffer.as_ref().map(|v| fbb.create_vector(v));
                let metadata = model.metadata.as_ref().map(|v| {
                    let w: Vec<_> = v.iter().map(|x| x.pack(&mut fbb)).collect();
                    fbb.create_vector(&w)
                });
                let signature_defs = model.signature_defs.as_ref().map(|v| {
                    let w: Vec<_> = v.iter().map(|x| x.pack(&mut fbb)).collect();
                    fbb.create_vector(&w)
                });
                let root = s::Model::create(
                    &mut fbb,
                    &s::ModelArgs {
                        version: model.version,
                        operator_codes,
                        subgraphs,
                        description,
                        buffers: Some(buffers),
                        metadata_buffer,
                        metadata,
                        signature_defs,
                        ..Default::default()
                    },
                );
                fbb.finish(root, Some(identifier));
                fbb.finished_data().to_vec()
            }
        }
    };
}

packer!(tflite);
packer!(circle);

#[cfg(test)]
mod tests {
    use super::*;
    use crate::schema::tflite as s;

    #[test]
    fn buffer_data_is_16_byte_aligned_in_both_layouts() {
        let model = s::ModelT {
            version: 3,
            subgraphs: Some(vec![s::SubGraphT::default()]),
            ..Default::default()
        };
        let datas: Vec<Vec<u8>> = (0..7).map(|n| vec![n as u8 + 1; n * 5 + 1]).collect();
        let mut slices: Vec<&[u8]> = vec![&[]];
        slices.extend(datas.iter().map(Vec::as_slice));
        for layout in [Layout::Inline, Layout::Offsets] {
            let bytes = tflite::pack(&model, &slices, layout, "TFL3");
            let m = s::root_as_model(&bytes).unwrap();
            let bufs = m.buffers().unwrap();
            assert_eq!(bufs.len(), slices.len());
            assert!(bufs.get(0).data().is_none_or(|d| d.is_empty()));
            for (i, want) in slices.iter().enumerate().skip(1) {
                let b = bufs.get(i);
                let got: &[u8] = match layout {
                    Layout::Inline => b.data().unwrap().bytes(),
                    Layout::Offsets => &bytes[b.offset() as usize..][..b.size() as usize],
                };
                assert_eq!(got, *want, "{layout:?} buffer {i}");
                let at = got.as_ptr() as usize - bytes.as_ptr() as usize;
                assert_eq!(at % DATA_ALIGN, 0, "{layout:?} buffer {i} at {at}");
            }
        }
    }
}
