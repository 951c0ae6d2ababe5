//! The stall detector, one rule per cause, shared by every verb.
