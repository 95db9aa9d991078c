//! Scheduler plugins, one file each, and the registry that assembles profiles.
