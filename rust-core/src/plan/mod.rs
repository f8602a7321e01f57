//! Pure planning: validated segment lists ([`layout`]) and the copy
//! planners over them ([`planner`]).  No shim call, no allocation past
//! validation.

pub mod layout;
pub mod planner;
