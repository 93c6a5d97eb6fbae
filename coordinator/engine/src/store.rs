//! The engine's view of the store crates, under the one path its code has always used
//! (`crate::store::…`): the trait and records of `drover-store`, both backends
//! (`drover-store-sqlite` as [`sqlite`], with [`SqliteStore`] and [`sqlite_backup`] at the
//! top; `drover-store-postgres` as [`postgres`]), and the async helpers the store crates leave
//! out ([`blocking`], [`read_now`], [`inline`], and the task-local half of [`fence`]), which
//! live in `store_calls.rs`.

pub use drover_store::*;
pub use drover_store_postgres as postgres;
pub use drover_store_sqlite as sqlite;
pub use drover_store_sqlite::{SqliteStore, backup as sqlite_backup};

pub use crate::store_calls::{blocking, inline, read_now};

pub mod fence {
    //! Fencing: `drover_store::fence` (the term, and a blocking thread's side of it) with the
    //! engine's task-local side — [`scope`], [`spawn`], and a [`current`] that reads the
    //! thread's term or else the task's.

    pub use drover_store::fence::*;

    pub use crate::store_calls::{current, scope, spawn};
}
