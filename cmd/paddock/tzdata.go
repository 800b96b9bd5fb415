package main

// The IANA time-zone database, embedded (about 450 KB), so that schedule
// time zones work on hosts without /usr/share/zoneinfo (minimal containers).
// Go uses the system database first when it has one.
import _ "time/tzdata"
