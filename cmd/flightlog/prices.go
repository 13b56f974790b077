package main

// Price table for `flightlog bench`'s dollars per GB ingested.
//
// These are AWS LIST PRICES for US East (N. Virginia), us-east-1, as
// published in 2025 (S3 Express One Zone after its price reduction of
// 2025-04-10; the S3 FAQ's worked example uses these figures). They are list
// prices to be checked against the current price page before quoting: they
// change, differ by region, and exclude discounts, tiering past 50 TB and
// data transfer. S3 Standard bills no per-GB upload charge; S3 Express One
// Zone bills one on every uploaded byte. Cross-zone transfer to the remote
// Express copies is NOT included (AWS lists S3 transfer within a region as
// free; check this for your access path).
//
// Storage is billed per GB-month; transit data lives only until settle
// rewrites it and trim deletes it, so bench charges storage for the time a
// transit copy lives: with --settle-interval, the residency it measured
// (the mean transit bytes held over the rate they were PUT); without, the
// assumed --transit-hours. 730 hours make a month. The settled objects'
// own storage (history, in the Standard set) is not charged.
type classPrices struct {
	Name             string  `json:"name"`
	PutPer1000       float64 `json:"put_per_1000_usd"`
	UploadPerGB      float64 `json:"upload_per_gb_usd"`
	StoragePerGBMo   float64 `json:"storage_per_gb_month_usd"`
	Region, ListedAt string  `json:"-"`
}

var priceTable = map[string]classPrices{
	"standard": {Name: "S3 Standard", PutPer1000: 0.005, UploadPerGB: 0, StoragePerGBMo: 0.023, Region: "us-east-1", ListedAt: "2025"},
	"express":  {Name: "S3 Express One Zone", PutPer1000: 0.00113, UploadPerGB: 0.0032, StoragePerGBMo: 0.11, Region: "us-east-1", ListedAt: "2025 (after 2025-04-10)"},
}

const hoursPerMonth = 730

// costPerGB is the bill of ingesting one GB (1e9 bytes) of record bodies.
type costPerGB struct {
	Prices  string  `json:"prices"`
	Puts    float64 `json:"puts_usd"`
	Upload  float64 `json:"upload_usd"`
	Storage float64 `json:"storage_usd"`
	Total   float64 `json:"total_usd"`
}

// cost prices a run: putsPerGB PUT requests and putBytesPerByte bytes
// uploaded (all copies) per body byte, stored for transitHours.
func cost(class string, putsPerGB, putBytesPerByte, transitHours float64) costPerGB {
	p := priceTable[class]
	c := costPerGB{
		Prices:  p.Name + " list prices, " + p.Region + ", " + p.ListedAt + " (check before quoting)",
		Puts:    putsPerGB * p.PutPer1000 / 1000,
		Upload:  putBytesPerByte * p.UploadPerGB,
		Storage: putBytesPerByte * p.StoragePerGBMo * transitHours / hoursPerMonth,
	}
	c.Total = c.Puts + c.Upload + c.Storage
	return c
}
