//! Reading packets: capture files (pcap, pcapng), link layers, and the lab's own live capture.
pub mod live;
pub mod pcap_writer;
