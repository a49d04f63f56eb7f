pub mod sasl;
