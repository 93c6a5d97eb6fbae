//! (being written in this change)
