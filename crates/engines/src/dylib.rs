//! A C library loaded at run time, its functions resolved by name up front: one missing
//! symbol refuses the library whole, naming it, before any function is called.

/// Declares `Api`: the library and each function, as `name: fn(args) -> ret;`, after the text
/// naming the release whose signatures they are (said when a symbol is missing).
macro_rules! api {
    ($release:literal; $($name:ident: fn($($arg:ty),* $(,)?) $(-> $ret:ty)?;)*) => {
        /// The resolved functions, with the library they live in (never unloaded).
        pub struct Api {
            _lib: libloading::Library,
            $(pub $name: unsafe extern "C" fn($($arg),*) $(-> $ret)?,)*
        }

        impl Api {
            /// Loads the library and resolves every function, or says which is missing.
            ///
            /// # Safety
            /// Loading runs the library's initialisers, and the functions are called with the
            /// declared signatures: `path` must be the release they were declared from.
            pub unsafe fn load(path: &std::path::Path) -> Result<Api, String> {
                let lib = unsafe { libloading::Library::new(path) }.map_err(|e| e.to_string())?;
                $(
                    let $name = *unsafe {
                        lib.get::<unsafe extern "C" fn($($arg),*) $(-> $ret)?>(stringify!($name))
                    }
                    .map_err(|e| format!("{}: {e} (not {}?)", stringify!($name), $release))?;
                )*
                Ok(Api { _lib: lib, $($name,)* })
            }
        }
    };
}

pub(crate) use api;
