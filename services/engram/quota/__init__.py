"""QuotaService: atomic byte accounting per space, per tenant and for the instance."""
